//! Who runs a task wherever it is woken: its [`Owner`] (a pool, or a
//! worker's home for its pinned tasks), known to the task core only
//! through that trait and held in the task's block through one thin
//! pointer ([`OwnerRef`]).

use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::Runnable;

/// Who runs a stealable task wherever it is woken: its pool. The task core
/// knows its owner only through this trait, and each task's block holds
/// its owner through one thin pointer ([`OwnerRef`]): a fat `Arc<dyn _>`
/// would make every block 8 bytes bigger.
///
/// # Safety
///
/// An implementor has one [`OwnerHeader`] field, made by
/// `OwnerHeader::new::<Self>()`, at [`HEADER_OFFSET`](Owner::HEADER_OFFSET)
/// (`std::mem::offset_of!`), and returns that field from
/// [`header`](Owner::header): the owner is then found `HEADER_OFFSET` bytes
/// before its header, and the header's vtable is the owner's own. (No
/// `repr(C)`: the compiler keeps its own field order, which the pool's hot
/// atomics are laid out by.)
pub(crate) unsafe trait Owner: Send + Sync + Sized + 'static {
    /// Where the header is in `Self`: `std::mem::offset_of!(Self, field)`.
    const HEADER_OFFSET: usize;

    /// Queues `runnable`, woken on whatever thread. Once `runnable` is
    /// queued, the task may run, finish and free its block (and with it
    /// perhaps the last other reference to `self`) on another thread: an
    /// owner that still needs `self` after giving `runnable` away takes
    /// [`owner_of`](super::meta::owner_of) it first, and returns that reference
    /// for the caller to drop once this call has returned (dropping the
    /// last one inside it would free `self` while `&self` is still live).
    fn schedule(&self, runnable: Runnable) -> Option<OwnerRef>;

    /// The header of `self`, at `HEADER_OFFSET`.
    fn header(&self) -> &OwnerHeader;
}

/// A field of an [`Owner`]: the owner's vtable, so that a thin pointer to
/// the header is enough to schedule on, retain and release it.
pub(crate) struct OwnerHeader {
    pub(super) vtable: &'static OwnerVtable,
}

/// What an owner does, given its header: its vtable. [`Owner`]s get theirs
/// from [`OwnerHeader::new`]; an owner that is not itself in an `Arc` (a
/// worker's home for its pinned tasks, inside its pool) writes its own and
/// uses [`OwnerHeader::with_vtable`].
pub(crate) struct OwnerVtable {
    /// Queues a task woken on whatever thread (see [`Owner::schedule`]).
    pub(crate) schedule: unsafe fn(NonNull<OwnerHeader>, Runnable),
    /// Takes one more count on whatever keeps the header alive.
    pub(crate) retain: unsafe fn(NonNull<OwnerHeader>),
    /// Gives one back (may free the header).
    pub(crate) release: unsafe fn(NonNull<OwnerHeader>),
    /// Queues a job that is not a task's on the thread the owner runs its
    /// pinned work on: a fiber's resumption (`fiber::sched`), for a pool
    /// worker's home; `None` for an owner that takes none.
    pub(crate) push_pinned: Option<unsafe fn(NonNull<OwnerHeader>, super::Job)>,
}

/// The vtable of owners of type `T`.
struct VtableOf<T>(std::marker::PhantomData<T>);

impl<T: Owner> VtableOf<T> {
    const VTABLE: OwnerVtable = OwnerVtable {
        schedule: Self::schedule,
        retain: Self::retain,
        release: Self::release,
        push_pinned: None,
    };

    /// The owner whose header is at `header`.
    ///
    /// # Safety
    /// `header` is the header of a live `T` (the `Owner` contract).
    #[inline]
    unsafe fn owner(header: NonNull<OwnerHeader>) -> NonNull<T> {
        // SAFETY: by the caller and the `Owner` contract, the `T` starts
        // `HEADER_OFFSET` bytes before its header, inside the same object.
        unsafe { header.byte_sub(T::HEADER_OFFSET).cast::<T>() }
    }

    /// # Safety
    /// `header` is the header of a live `T` (the `Owner` contract).
    unsafe fn schedule(header: NonNull<OwnerHeader>, runnable: Runnable) {
        // SAFETY: by the caller, the `T` is live. Only the owner is
        // borrowed for the call, not the block: see `Owner::schedule` for
        // who keeps the owner alive after the job leaves.
        let owner = unsafe { Self::owner(header).as_ref() };
        let keep = owner.schedule(runnable);
        // After the call: it may be the pool's last count.
        drop(keep);
    }

    /// # Safety
    /// `header` is the header of a `T` in an `Arc` with a strong count we
    /// hold.
    unsafe fn retain(header: NonNull<OwnerHeader>) {
        // SAFETY: by the caller, the owner's pointer is the one
        // `Arc::into_raw` gave (`OwnerRef::new`), of a live `Arc<T>`.
        unsafe { Arc::increment_strong_count(Self::owner(header).as_ptr()) }
    }

    /// # Safety
    /// As for `retain`; releases one strong count we own.
    unsafe fn release(header: NonNull<OwnerHeader>) {
        // SAFETY: as in `retain`, and the caller gives up the count.
        unsafe { Arc::decrement_strong_count(Self::owner(header).as_ptr()) }
    }
}

impl OwnerHeader {
    /// How this owner queues a job that is not a task's (see
    /// [`OwnerVtable::push_pinned`]).
    pub(crate) fn push_pinned(&self) -> Option<unsafe fn(NonNull<OwnerHeader>, super::Job)> {
        self.vtable.push_pinned
    }

    /// The header for an owner of type `T`.
    pub(crate) const fn new<T: Owner>() -> Self {
        OwnerHeader {
            vtable: &VtableOf::<T>::VTABLE,
        }
    }

    /// A header with a vtable of its own: see [`OwnerRef::retained`] for
    /// what the vtable must do.
    pub(crate) const fn with_vtable(vtable: &'static OwnerVtable) -> Self {
        OwnerHeader { vtable }
    }
}

/// A strong reference to a task's owner, one pointer wide.
pub(crate) struct OwnerRef(pub(super) NonNull<OwnerHeader>);

// SAFETY: an `Owner` is `Send + Sync`, and an `OwnerRef` is an `Arc` of one.
unsafe impl Send for OwnerRef {}
// SAFETY: as above.
unsafe impl Sync for OwnerRef {}

impl OwnerRef {
    pub(super) fn new<T: Owner>(owner: Arc<T>) -> Self {
        assert!(
            ptr::eq(
                (Arc::as_ptr(&owner) as *const u8).wrapping_add(T::HEADER_OFFSET),
                owner.header() as *const OwnerHeader as *const u8
            ),
            "an Owner's header is at its HEADER_OFFSET (offset_of! its header field)"
        );
        // Derived from the `Arc`'s own pointer, not from the `&OwnerHeader`:
        // its provenance covers the whole owner, which the vtable reaches
        // back to.
        let raw = Arc::into_raw(owner) as *const u8;
        let header = raw.wrapping_add(T::HEADER_OFFSET) as *mut OwnerHeader;
        // SAFETY: inside the owner's allocation (checked above), so not
        // null; the `Arc`'s count we gave up with `into_raw` is this
        // reference's.
        OwnerRef(unsafe { NonNull::new_unchecked(header) })
    }
}

impl OwnerRef {
    /// A reference to the owner whose header is at `header`, taking a count
    /// with its vtable's `retain`.
    ///
    /// # Safety
    ///
    /// `header` is live now, its pointer's provenance covers whatever the
    /// vtable's functions reach from it, and it stays live for as long as
    /// one count taken by `retain` is held: `schedule` may then be called
    /// with it, from any thread, under the contract of [`Owner::schedule`].
    pub(crate) unsafe fn retained(header: NonNull<OwnerHeader>) -> Self {
        // SAFETY: by the caller, the header is live and `retain` keeps it so.
        unsafe { (header.as_ref().vtable.retain)(header) };
        OwnerRef(header)
    }
}

impl Clone for OwnerRef {
    fn clone(&self) -> Self {
        // SAFETY: we hold a strong reference to the owner this header is in.
        unsafe { (self.0.as_ref().vtable.retain)(self.0) };
        OwnerRef(self.0)
    }
}

impl Drop for OwnerRef {
    fn drop(&mut self) {
        // SAFETY: we give up the strong reference we hold; the vtable is
        // read before the release that may free the owner.
        unsafe {
            let release = self.0.as_ref().vtable.release;
            release(self.0)
        }
    }
}
