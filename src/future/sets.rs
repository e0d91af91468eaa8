//! Future sets with libdex's meanings: [`all`], [`all_race`], [`any`],
//! [`first`]. Each takes any number of futures of `Result<T, E>`; the
//! losers are dropped as soon as the set is decided, which cancels them
//! (S5: a dropped [`Task`](crate::Task) cancels its task).

use std::future::Future;

use futures::future::{join_all, select_all, select_ok, try_join_all};

/// Waits for every future; resolves to all the values in order, or, if any
/// rejected, to the error of the first (in order) that did. Unlike libdex's
/// `dex_future_all`, whose result depends on the last member to finish, the
/// outcome does not depend on timing.
///
/// ```
/// let pool = gdex::ThreadPool::builder().workers(2).build().unwrap();
/// let s = pool.scheduler();
/// let tasks = (1..=3).map(|i| s.spawn(async move { i * 10 }));
/// assert_eq!(gdex::block_on(gdex::all(tasks)).unwrap(), [10, 20, 30]);
/// ```
pub async fn all<I, T, E>(futures: I) -> Result<Vec<T>, E>
where
    I: IntoIterator,
    I::Item: Future<Output = Result<T, E>>,
{
    join_all(futures).await.into_iter().collect()
}

/// Resolves to every value in order, or rejects at the first rejection (in
/// time), dropping the futures still pending (libdex's
/// `dex_future_all_race`).
///
/// ```
/// let failing = async { Err::<u32, _>(gdex::Error::TimedOut) };
/// let never = std::future::pending::<Result<u32, gdex::Error>>();
/// let race = gdex::all_race([Box::pin(failing) as futures::future::BoxFuture<_>, Box::pin(never)]);
/// assert!(matches!(gdex::block_on(race), Err(gdex::Error::TimedOut)));
/// ```
pub async fn all_race<I, T, E>(futures: I) -> Result<Vec<T>, E>
where
    I: IntoIterator,
    I::Item: Future<Output = Result<T, E>>,
{
    try_join_all(futures).await
}

/// Resolves to the first value to arrive and drops the others; rejects
/// only when every future has rejected, with the last rejection (libdex's
/// `dex_future_any`).
///
/// # Panics
/// Given no futures: nothing could ever resolve it.
///
/// ```
/// let slow = glib::timeout_future(std::time::Duration::from_secs(60));
/// let futures: Vec<futures::future::BoxFuture<'static, Result<&str, gdex::Error>>> = vec![
///     Box::pin(async { Err(gdex::Error::Closed) }),
///     Box::pin(async move { slow.await; Ok("slow") }),
///     Box::pin(async { Ok("fast") }),
/// ];
/// assert_eq!(gdex::block_on(gdex::any(futures)).unwrap(), "fast");
/// ```
pub async fn any<I, T, E>(futures: I) -> Result<T, E>
where
    I: IntoIterator,
    I::Item: Future<Output = Result<T, E>>,
{
    select_ok(pinned_nonempty(futures, "any"))
        .await
        .map(|(value, _losers)| value)
}

/// Resolves or rejects like the first future to complete, and drops the
/// others (libdex's `dex_future_first`).
///
/// # Panics
/// Given no futures: nothing could ever complete it.
///
/// ```
/// use futures::FutureExt;
/// let work = std::future::pending::<Result<u32, gdex::Error>>().boxed();
/// let deadline = gdex::reject_after(std::time::Duration::from_millis(5)).boxed();
/// assert!(matches!(gdex::block_on(gdex::first([work, deadline])), Err(gdex::Error::TimedOut)));
/// ```
pub async fn first<I, T, E>(futures: I) -> Result<T, E>
where
    I: IntoIterator,
    I::Item: Future<Output = Result<T, E>>,
{
    select_all(pinned_nonempty(futures, "first")).await.0
}

/// The futures, boxed so that the `select` combinators can move them;
/// panics, naming `set`, if there are none.
fn pinned_nonempty<I: IntoIterator>(futures: I, set: &str) -> Vec<std::pin::Pin<Box<I::Item>>> {
    let futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    assert!(
        !futures.is_empty(),
        "gdex::{set} needs at least one future: an empty set can never complete"
    );
    futures
}
