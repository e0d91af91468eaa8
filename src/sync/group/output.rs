//! What a member gives, seen by its group ([`GroupOutput`]): whether it
//! failed, and the value or error the group hands back for it.

use super::Outcome;
use crate::Error;

/// What a member of a [`TaskGroup`] gives, seen by the group: whether it
/// failed, and the value or error the group hands back for it.
///
/// A member *fails* when it panics, when its scheduler drops it unfinished
/// (a pool shut down), or when its output says so: an `Err` for a group of
/// `Result`s. The first failure is what
/// [`close`](crate::TaskGroup::close) reports, and what cancels the other
/// members in a group built with
/// [`cancel_on_error`](crate::TaskGroupBuilder::cancel_on_error).
///
/// gdex implements it for `()` (members that only fail by panicking or by
/// being dropped; the error is [`Error`]) and for `Result<U, E>` where `E`
/// can carry a gdex [`Error`] (`gdex::Error`, `glib::Error`,
/// `Box<dyn std::error::Error + Send + Sync>`, `anyhow::Error`, …): a
/// panicked or dropped member becomes an `E` through `From`. For a type of
/// your own:
///
/// ```
/// struct Hash([u8; 32]);
/// impl gdex::GroupOutput for Hash {
///     type Value = Hash;
///     type Error = gdex::Error;
///     fn is_failure(&self) -> bool {
///         false
///     }
///     fn into_result(self) -> Result<Hash, gdex::Error> {
///         Ok(self)
///     }
/// }
/// let group = gdex::TaskGroup::<Hash>::new();
/// group.spawn(async { Hash([0; 32]) }).unwrap();
/// assert!(gdex::block_on(group.close()).is_ok());
/// ```
///
/// gdex calls these with the group's lock released, so they may use the
/// group: `is_failure` once per member that finishes, on the thread where
/// it finished (a panic in it is that member's failure,
/// [`Error::Panicked`] with its message, and the output is dropped);
/// `into_result` and `From` in [`close`](crate::TaskGroup::close) and
/// [`close_with_results`](crate::TaskGroup::close_with_results), on the
/// thread that polls them.
///
/// [`TaskGroup`]: crate::TaskGroup
pub trait GroupOutput: Sized {
    /// What a member that succeeded gives back (with
    /// [`keep_results`](crate::TaskGroupBuilder::keep_results)).
    type Value;
    /// What a member that failed gives back; a panicked or dropped member
    /// becomes one through `From`.
    type Error: From<Error>;

    /// True if this output is a failure. A panic here counts as one.
    fn is_failure(&self) -> bool;

    /// The output as a result: `Err` exactly when
    /// [`is_failure`](Self::is_failure) is true.
    fn into_result(self) -> Result<Self::Value, Self::Error>;
}

impl GroupOutput for () {
    type Value = ();
    type Error = Error;

    fn is_failure(&self) -> bool {
        false
    }

    fn into_result(self) -> Result<(), Error> {
        Ok(())
    }
}

impl<U, E: From<Error>> GroupOutput for Result<U, E> {
    type Value = U;
    type Error = E;

    fn is_failure(&self) -> bool {
        self.is_err()
    }

    fn into_result(self) -> Result<U, E> {
        self
    }
}

/// A member's outcome as the caller gets it.
pub(super) fn deliver<T: GroupOutput>(outcome: Outcome<T>) -> Result<T::Value, T::Error> {
    match outcome {
        Ok(output) => output.into_result(),
        Err(error) => Err(error.into()),
    }
}
