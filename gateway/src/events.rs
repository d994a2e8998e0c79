//! The gateway's one Redis pub/sub connection, fanned out to every waiting request.
//!
//! Workers publish status events (`SPUBLISH`: sharded pub/sub, see `pirq_queue::events`) on the
//! channel of the query's partition (`{P}:done`, `{P:p}:done`): one message carries frames for
//! several queries (`pirq_queue::record::frames`), a final frame the whole final record, answers
//! included. A single task per gateway stays subscribed to every partition's channel and wakes
//! the waiters registered for an id; requests never open their own subscription. A frame is
//! decoded only when somebody here waits for its id (most frames are for other gateways'
//! clients).
//!
//! A wake-up carries what the event said: progress (`running`), which needs no read, or the
//! final record, which the waiter hands over without reading Redis. A wake-up after a
//! reconnect, or from the re-read timer, carries nothing and the waiter reads the record.
//! Progress wakes only the waiters of ids that somebody follows ([`Events::subscribe`]: event
//! streams, long-polls, whose answers say `running`); a held submit
//! ([`Events::subscribe_final`]) answers the final record or, past its wait, `queued` whatever
//! the query's progress, so its `running` event would only cost a wake-up: a task scheduled,
//! on connection lanes a hand-off to the lane's thread (`docs/bench/host-path.md`). (The
//! waiters of one id share one channel: while anybody follows an id, all its waiters wake.)
//!
//! **On connection lanes, one hand-off a lane a message.** The hub runs on the shared runtime;
//! a waiter served by a connection lane ([`crate::lanes`]) waits on the lane's thread, and
//! waking it from the hub's thread is a remote schedule: an `eventfd` write to wake the lane
//! and its reading there (~1.4 a held query, docs/bench/host-path.md). One message carries
//! the frames of a whole block of queries, so the hub sorts a message's wake-ups by the lane
//! their waiters registered on and hands each lane its batch once ([`LaneInbox`]); the lane's
//! own [`LaneDeliveries`] task sends them there, where each wake-up is a local one.
//!
//! No lost wake-up: a waiter calls [`Events::subscribe`] *before* it reads the query's status
//! from Redis. The channel subscription itself is long established, so any change published
//! after the read is delivered to the waiter's receiver; a change published before the read is
//! seen by the read. When the pub/sub connection drops (messages may be lost meanwhile), every
//! waiter is woken on reconnect to read again, and waiters also re-read on a slow timer.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use pirq_queue::record::{self, Notice};
use pirq_queue::{QueryRecord, RedisTarget, RequestId};
use pirq_shared::layout::Layout;
use pirq_shared::wire::QueryStatus;
use tokio::sync::{mpsc, watch};

#[derive(Clone)]
pub struct Events {
    hub: Arc<Hub>,
}

struct Hub {
    waiters: Mutex<HashMap<RequestId, Waiting>>,
    connected: AtomicBool,
    /// `pirq_gateway_waiters`, looked up once: it is set at every registration and drop.
    count: metrics::Gauge,
}

impl Hub {
    fn new() -> Hub {
        Hub {
            waiters: Mutex::new(HashMap::new()),
            connected: AtomicBool::new(false),
            count: metrics::gauge!(pirq_shared::metrics::GATEWAY_WAITERS),
        }
    }
}

/// The waiters of one request id.
struct Waiting {
    /// The last notification; every send wakes the receivers.
    tx: watch::Sender<Option<Notice>>,
    /// How many of them follow progress: none, and a `running` frame wakes nobody.
    following: usize,
    /// The connection lane the first of them registered on, whose thread sends their wake-ups
    /// (every notice of the id goes the same way, so they arrive in order); `None` off lanes:
    /// the hub sends them itself.
    lane: Option<LaneInbox>,
}

/// A notification on its way to the waiters of one id: `None` asks them to read the record.
type Delivery = (watch::Sender<Option<Notice>>, Option<Notice>);

/// Where the hub hands a connection lane the wake-ups of its waiters, a message's at once.
#[derive(Clone)]
pub struct LaneInbox(mpsc::UnboundedSender<Vec<Delivery>>);

/// The lane's end of its [`LaneInbox`]: run on the lane's thread ([`LaneDeliveries::run`]).
pub struct LaneDeliveries(mpsc::UnboundedReceiver<Vec<Delivery>>);

thread_local! {
    /// The inbox of the connection lane this thread serves, if it serves one.
    static LANE: RefCell<Option<LaneInbox>> = const { RefCell::new(None) };
}

/// A connection lane's inbox and its deliveries.
pub fn lane_inbox() -> (LaneInbox, LaneDeliveries) {
    let (tx, rx) = mpsc::unbounded_channel();
    (LaneInbox(tx), LaneDeliveries(rx))
}

impl LaneInbox {
    /// Marks the calling thread as this lane's: waiters that register on it get their wake-ups
    /// through the inbox.
    pub fn enter(self) {
        LANE.with(|lane| *lane.borrow_mut() = Some(self));
    }
}

impl LaneDeliveries {
    /// Sends the wake-ups handed to the lane, on the lane's thread; ends when every inbox is gone.
    pub async fn run(mut self) {
        let mut batches = Vec::new();
        while self.0.recv_many(&mut batches, 64).await > 0 {
            for (tx, notice) in batches.drain(..).flatten() {
                tx.send_replace(notice);
            }
        }
    }
}

/// A message's wake-ups for waiters on lanes, a batch a lane, handed over once the hub's lock
/// is released.
#[derive(Default)]
struct Batches(Vec<(LaneInbox, Vec<Delivery>)>);

impl Batches {
    /// Wakes `waiting` now (off lanes) or adds its wake-up to its lane's batch.
    fn add(&mut self, waiting: &Waiting, notice: Option<Notice>) {
        let Some(lane) = &waiting.lane else {
            waiting.tx.send_replace(notice);
            return;
        };
        let delivery = (waiting.tx.clone(), notice);
        match self.0.iter_mut().find(|(l, _)| l.0.same_channel(&lane.0)) {
            Some((_, batch)) => batch.push(delivery),
            None => self.0.push((lane.clone(), vec![delivery])),
        }
    }

    /// Hands each lane its batch: one wake-up of its thread.
    fn send(self) {
        for (lane, batch) in self.0 {
            // Fails only when the lane has ended (shutdown), its waiters with it.
            let _ = lane.0.send(batch);
        }
    }
}

impl Hub {
    /// Passes each frame of a message to the waiters of its id, if there are any.
    fn notify(&self, payload: &[u8]) {
        let mut batches = Batches::default();
        {
            let waiters = self.waiters.lock().unwrap();
            if waiters.is_empty() {
                return;
            }
            for (id, frame) in record::frames(payload) {
                let Some(waiting) = waiters.get(&id) else {
                    continue;
                };
                match Notice::decode(&id, frame) {
                    // Final, its record too long for the event: the waiter reads it.
                    Some(Notice::Read) => batches.add(waiting, None),
                    Some(Notice::Progress(_)) if waiting.following == 0 => {}
                    Some(notice) => batches.add(waiting, Some(notice)),
                    None => {}
                }
            }
        }
        batches.send();
    }

    /// Wakes everyone to read again: events may have been missed.
    fn notify_all(&self) {
        let mut batches = Batches::default();
        for waiting in self.waiters.lock().unwrap().values() {
            batches.add(waiting, None);
        }
        batches.send();
    }
}

/// Interest in one request id. Dropping it unregisters.
pub struct Subscription {
    hub: Arc<Hub>,
    id: RequestId,
    rx: watch::Receiver<Option<Notice>>,
    /// Woken by progress too.
    follows: bool,
}

/// What a wake-up asks of a waiter.
#[derive(Clone, Debug)]
pub enum Wake {
    /// The query moved on but is not final (`running`): the event says all there is to say.
    Progress(QueryStatus),
    /// The query is final: its record, as the event carried it.
    Final(Arc<QueryRecord>),
    /// Read the record: events may have been missed (a reconnect, or no event at all when a
    /// waiter's timer ran out).
    Read,
}

impl Subscription {
    /// Resolves at the next notification for this id (or a reconnect), counting from the moment
    /// the subscription was made.
    pub async fn changed(&mut self) -> Wake {
        if self.rx.changed().await.is_err() {
            // The sender is never dropped while a receiver is registered; be safe anyway.
            std::future::pending::<()>().await
        }
        match &*self.rx.borrow_and_update() {
            Some(Notice::Final(record)) => Wake::Final(record.clone()),
            Some(Notice::Progress(status)) => Wake::Progress(*status),
            Some(Notice::Read) | None => Wake::Read,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut waiters = self.hub.waiters.lock().unwrap();
        if let Some(waiting) = waiters.get_mut(&self.id) {
            // Our own receiver is still alive here: 1 means nobody else waits for this id.
            if waiting.tx.receiver_count() <= 1 {
                waiters.remove(&self.id);
            } else if self.follows {
                waiting.following -= 1;
            }
        }
        self.hub.count.set(waiters.len() as f64);
    }
}

impl Events {
    /// Starts the listener task on the party's status channel; it reconnects with backoff for
    /// as long as the process lives.
    pub fn start(target: RedisTarget, layout: Layout) -> Events {
        let hub = Arc::new(Hub::new());
        tokio::spawn(listen(target, layout, hub.clone(), true));
        Events { hub }
    }

    /// Listens to the status channels of another table of the party too (issue 38), on a
    /// connection of its own, feeding the same waiters (request ids are unique across tables).
    /// Readiness follows the default table's connection only.
    pub fn listen_to_table(&self, target: RedisTarget, layout: Layout) {
        tokio::spawn(listen(target, layout, self.hub.clone(), false));
    }

    /// Registers interest in `id`, its progress included. Call before reading the query's
    /// status.
    pub fn subscribe(&self, id: &RequestId) -> Subscription {
        self.register(id, true)
    }

    /// Registers interest in `id`'s final record only (and in re-reads): a waiter that answers
    /// the same whatever the query's progress. Call before the query can be answered.
    pub fn subscribe_final(&self, id: &RequestId) -> Subscription {
        self.register(id, false)
    }

    fn register(&self, id: &RequestId, follows: bool) -> Subscription {
        let mut waiters = self.hub.waiters.lock().unwrap();
        let waiting = waiters.entry(*id).or_insert_with(|| Waiting {
            tx: watch::Sender::new(None),
            following: 0,
            lane: LANE.with(|lane| lane.borrow().clone()),
        });
        waiting.following += usize::from(follows);
        let rx = waiting.tx.subscribe();
        self.hub.count.set(waiters.len() as f64);
        Subscription {
            hub: self.hub.clone(),
            id: *id,
            rx,
            follows,
        }
    }

    /// Whether the pub/sub connection is up (part of readiness).
    pub fn is_connected(&self) -> bool {
        self.hub.connected.load(Ordering::Relaxed)
    }
}

async fn listen(target: RedisTarget, layout: Layout, hub: Arc<Hub>, reports_readiness: bool) {
    let channel = layout.events().join(" ");
    let mut backoff = pirq_party::Backoff::default();
    loop {
        match pirq_queue::events::subscribe(&target, &layout).await {
            Ok(events) => {
                backoff.reset();
                if reports_readiness {
                    hub.connected.store(true, Ordering::Relaxed);
                    metrics::gauge!(pirq_shared::metrics::GATEWAY_PUBSUB_CONNECTED).set(1.0);
                }
                tracing::info!(%channel, "pub/sub subscribed");
                // Anything published while we were away was missed: everyone reads again.
                hub.notify_all();
                let mut events = std::pin::pin!(events);
                while let Some(payload) = events.next().await {
                    hub.notify(&payload);
                }
                if reports_readiness {
                    hub.connected.store(false, Ordering::Relaxed);
                    metrics::gauge!(pirq_shared::metrics::GATEWAY_PUBSUB_CONNECTED).set(0.0);
                }
                tracing::warn!(%channel, "pub/sub connection lost; reconnecting");
                hub.notify_all();
            }
            Err(e) => tracing::warn!(%channel, error = %e, "pub/sub connect failed; retrying"),
        }
        backoff.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hub without its listener: notified by hand.
    fn events() -> Events {
        Events {
            hub: Arc::new(Hub::new()),
        }
    }

    /// One frame of a status event message (`<id> <length>\n<record>`).
    fn frame(id: &RequestId, record: &[u8]) -> Vec<u8> {
        let mut frame = format!("{id} {}\n", record.len()).into_bytes();
        frame.extend_from_slice(record);
        frame
    }

    #[test]
    fn progress_wakes_only_the_waiters_that_follow_it() {
        let events = events();
        let held_id = RequestId::parse(&"ab".repeat(16)).unwrap();
        let streamed_id = RequestId::parse(&"cd".repeat(16)).unwrap();
        let running = |id| frame(id, QueryStatus::Running.as_str().as_bytes());
        let held = events.subscribe_final(&held_id);
        let stream = events.subscribe(&streamed_id);
        events
            .hub
            .notify(&[running(&held_id), running(&streamed_id)].concat());
        assert!(!held.rx.has_changed().unwrap(), "held woken by progress");
        assert!(stream.rx.has_changed().unwrap(), "a stream missed progress");
        // Its follower gone, a query's progress wakes nobody else waiting for it.
        let late = events.subscribe_final(&streamed_id);
        drop(stream);
        events.hub.notify(&running(&streamed_id));
        assert!(!late.rx.has_changed().unwrap(), "held woken by progress");
        // The final word (here: read the record) and a reconnect wake everyone.
        events.hub.notify(&frame(&held_id, b""));
        assert!(held.rx.has_changed().unwrap(), "held missed its answer");
        events.hub.notify_all();
        assert!(late.rx.has_changed().unwrap(), "a reconnect missed");
        drop((held, late));
        assert!(events.hub.waiters.lock().unwrap().is_empty());
    }

    #[test]
    fn a_lanes_waiters_are_handed_a_messages_wake_ups_at_once_and_in_order() {
        let events = events();
        let (inbox, mut deliveries) = lane_inbox();
        let ids: Vec<_> = ["ab", "cd", "ef"]
            .iter()
            .map(|h| RequestId::parse(&h.repeat(16)).unwrap())
            .collect();
        // Two waiters on this thread as a lane's, one off lanes.
        inbox.enter();
        let mut on_lane = [events.subscribe(&ids[0]), events.subscribe_final(&ids[1])];
        LANE.with(|lane| lane.borrow_mut().take());
        let off_lane = events.subscribe_final(&ids[2]);
        let done = |id| frame(id, &[]);
        let running = |id| frame(id, QueryStatus::Running.as_str().as_bytes());
        events
            .hub
            .notify(&[running(&ids[0]), done(&ids[1]), done(&ids[2])].concat());
        events.hub.notify(&done(&ids[0]));
        // Off lanes: woken by the hub itself; on the lane: nobody until the lane delivers.
        assert!(off_lane.rx.has_changed().unwrap());
        assert!(on_lane.iter().all(|s| !s.rx.has_changed().unwrap()));
        // One batch a message, the lane's two wake-ups of the first in one.
        let first = deliveries.0.try_recv().unwrap();
        assert_eq!(first.len(), 2);
        assert_eq!(deliveries.0.try_recv().unwrap().len(), 1);
        assert!(deliveries.0.try_recv().is_err());
        for (tx, notice) in first {
            tx.send_replace(notice);
        }
        assert!(matches!(
            *on_lane[0].rx.borrow_and_update(),
            Some(Notice::Progress(QueryStatus::Running))
        ));
        assert!(on_lane[1].rx.has_changed().unwrap());
        // A reconnect goes the same way: one batch for the lane.
        events.hub.notify_all();
        assert_eq!(deliveries.0.try_recv().unwrap().len(), 2);
        drop((on_lane, off_lane));
        assert!(events.hub.waiters.lock().unwrap().is_empty());
    }
}
