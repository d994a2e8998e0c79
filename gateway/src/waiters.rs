//! The cap on requests that wait: long-polls (`?wait=`) and event streams.
//!
//! Each waiter holds a connection and costs a status read every couple of seconds and a slot in
//! the pub/sub fan-out. Past `--max-waiters`, new ones get 503 `too_many_waiters` with
//! `Retry-After` at once, while plain status reads and submits go on.

use std::sync::Arc;

use pirq_shared::error::ErrorCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

#[derive(Clone)]
pub struct Waiters {
    slots: Arc<Semaphore>,
    max: u32,
}

/// A waiter's slot, given back on drop.
pub type Slot = OwnedSemaphorePermit;

impl Waiters {
    pub fn new(max: u32) -> Waiters {
        Waiters {
            slots: Arc::new(Semaphore::new(max as usize)),
            max,
        }
    }

    /// A slot, or 503 `too_many_waiters` when all are taken.
    pub fn enter(&self) -> Result<Slot, ApiError> {
        self.slots.clone().try_acquire_owned().map_err(|_| {
            crate::caps::refused(crate::caps::Cap::Waiters);
            ApiError::new(
                ErrorCode::TooManyWaiters,
                format!(
                    "{} long-polls and event streams are open on this gateway (--max-waiters); \
                     poll without ?wait= or retry later",
                    self.max
                ),
            )
            .retry_after(1)
        })
    }

    /// The cap.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// Slots in use.
    pub fn in_use(&self) -> usize {
        self.max as usize - self.slots.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_cap_waiters_get_503_until_a_slot_is_free() {
        let w = Waiters::new(2);
        let a = w.enter().unwrap();
        let _b = w.enter().unwrap();
        let e = w.enter().unwrap_err();
        assert_eq!(e.code(), "too_many_waiters");
        assert_eq!(e.status().as_u16(), 503);
        drop(a);
        assert!(w.enter().is_ok());
    }
}
