//! The rotation's job bookkeeping as a synchronous state machine: which job joins next and with
//! which keys, which parts are in flight, when a job is whole, what a stop hands back. No
//! scanner, no Redis, no clock, no thread: every rule is a unit test here.
//!
//! [`crate::schedule`]'s rotation thread keeps one book per table, beside the jobs' keys and
//! answers; the rules are all here:
//! - jobs join in arrival order, and the rest of a job joined in part joins before any other;
//! - a job with more keys than the rotation holds joins in parts of at most its capacity;
//! - a part that does not fit waits while keys are in flight (room comes as they leave); one
//!   that does not fit even an empty rotation fails its job;
//! - a job is done once all its keys joined and every part finished; a failed job (a part that
//!   did not join, or finished without answers) joins nothing more and is done once its parts in
//!   flight are;
//! - a stop hands back the jobs not joined at all; a job joined in part joins whole.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// A job's number in the book, in arrival order.
pub type JobId = u64;

/// Keys `first..first + len` of job `job`, to join as one part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub job: JobId,
    pub first: usize,
    pub len: usize,
}

/// What to do at a segment boundary ([`Book::next`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Join this part, then say how it went ([`Book::joined`] or [`Book::failed`]).
    Join(Part),
    /// The next part does not fit until keys in flight leave.
    Wait,
    /// The next part does not fit even an empty rotation: fail its job ([`Book::failed`]).
    TooLarge(Part),
    /// No job waits or is joining.
    Idle,
}

/// A job whose every part finished (or that failed with none in flight).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub job: JobId,
    pub failed: bool,
}

/// One job's progress.
#[derive(Debug)]
struct Job {
    keys: usize,
    joined: usize,
    /// Parts joined and not finished.
    in_flight: usize,
    failed: bool,
}

/// The bookkeeping of one rotation, over the scanner's part tickets `T`.
#[derive(Debug)]
pub struct Book<T> {
    capacity: usize,
    waiting: VecDeque<JobId>,
    jobs: HashMap<JobId, Job>,
    parts: HashMap<T, Part>,
    /// The job whose keys join in parts, while some have not joined yet.
    joining: Option<JobId>,
    next_id: JobId,
}

impl<T: Hash + Eq> Book<T> {
    /// A book for a rotation that holds `capacity` keys (at least one).
    pub fn new(capacity: usize) -> Book<T> {
        Book {
            capacity: capacity.max(1),
            waiting: VecDeque::new(),
            jobs: HashMap::new(),
            parts: HashMap::new(),
            joining: None,
            next_id: 0,
        }
    }

    /// A job of `keys` keys (at least one: `serve::check_job` refuses empty ones) waits to join.
    pub fn add(&mut self, keys: usize) -> JobId {
        let id = self.next_id;
        self.next_id += 1;
        let job = Job {
            keys,
            joined: 0,
            in_flight: 0,
            failed: false,
        };
        self.jobs.insert(id, job);
        self.waiting.push_back(id);
        id
    }

    /// Keys of the jobs waiting, none joined: the scheduler reads more only while fewer than a
    /// rotation's worth wait (what is read is held from peers).
    pub fn waiting_keys(&self) -> usize {
        self.waiting.iter().map(|id| self.jobs[id].keys).sum()
    }

    /// Parts in flight, of every job.
    pub fn parts_in_flight(&self) -> usize {
        self.parts.len()
    }

    /// The next part to join: the rest of the job joining, else the first job waiting.
    /// `fits(len)` says whether the rotation takes `len` keys now.
    pub fn next(&mut self, fits: impl Fn(usize) -> bool) -> Next {
        let id = match self.joining {
            Some(id) => id,
            None => match self.waiting.pop_front() {
                Some(id) => {
                    self.joining = Some(id);
                    id
                }
                None => return Next::Idle,
            },
        };
        let job = &self.jobs[&id];
        let part = Part {
            job: id,
            first: job.joined,
            len: (job.keys - job.joined).min(self.capacity),
        };
        if fits(part.len) {
            Next::Join(part)
        } else if self.parts.is_empty() {
            Next::TooLarge(part)
        } else {
            Next::Wait
        }
    }

    /// `part` joined the rotation under `ticket`.
    pub fn joined(&mut self, part: Part, ticket: T) {
        let job = self.jobs.get_mut(&part.job).expect("a part of a known job");
        job.joined += part.len;
        job.in_flight += 1;
        if job.joined >= job.keys {
            self.joining = None;
        }
        self.parts.insert(ticket, part);
    }

    /// `job` failed (its part did not join, or was too large): the rest of it joins nothing;
    /// done now when none of its parts is in flight.
    pub fn failed(&mut self, job: JobId) -> Option<Done> {
        self.mark_failed(job)?;
        self.done_if_whole(job)
    }

    /// The part under `ticket` finished its turn, answered or not (`failed`: its job fails, as
    /// with [`Book::failed`]). The part, and its job when that was its last part.
    pub fn finished(&mut self, ticket: &T, failed: bool) -> Option<(Part, Option<Done>)> {
        let part = self.parts.remove(ticket)?;
        self.jobs.get_mut(&part.job)?.in_flight -= 1;
        if failed {
            self.mark_failed(part.job);
        }
        Some((part, self.done_if_whole(part.job)))
    }

    /// Stopping: the jobs not joined at all, to hand back (the waiting ones, and the joining
    /// one if none of its keys joined). A job joined in part stays, to join whole.
    pub fn stop(&mut self) -> Vec<JobId> {
        let mut back: Vec<JobId> = self.waiting.drain(..).collect();
        if let Some(id) = self.joining.filter(|id| self.jobs[id].joined == 0) {
            self.joining = None;
            back.insert(0, id);
        }
        for id in &back {
            self.jobs.remove(id);
        }
        back
    }

    /// Nothing waits, joins or is in flight.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    fn mark_failed(&mut self, job: JobId) -> Option<()> {
        let state = self.jobs.get_mut(&job)?;
        state.failed = true;
        state.joined = state.keys;
        if self.joining == Some(job) {
            self.joining = None;
        }
        Some(())
    }

    fn done_if_whole(&mut self, id: JobId) -> Option<Done> {
        let job = &self.jobs[&id];
        if job.joined < job.keys || job.in_flight > 0 {
            return None;
        }
        let failed = job.failed;
        self.jobs.remove(&id);
        Some(Done { job: id, failed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Joins what `next` offers while it fits `room`, numbering tickets from `ticket`.
    fn join_all(book: &mut Book<u32>, room: &mut usize, ticket: &mut u32) -> Vec<Part> {
        let mut parts = Vec::new();
        while let Next::Join(part) = book.next(|n| n <= *room) {
            *room -= part.len;
            book.joined(part, *ticket);
            *ticket += 1;
            parts.push(part);
        }
        parts
    }

    /// Joins the next part, which must fit, under `ticket`.
    fn join_next(book: &mut Book<u32>, ticket: u32) -> Part {
        let Next::Join(part) = book.next(|_| true) else {
            panic!("a part to join");
        };
        book.joined(part, ticket);
        part
    }

    /// Finishes the part under `ticket`, answered; its job when that was its last part.
    fn finish(book: &mut Book<u32>, ticket: u32) -> Option<Done> {
        book.finished(&ticket, false).and_then(|(_, done)| done)
    }

    fn part(job: JobId, first: usize, len: usize) -> Part {
        Part { job, first, len }
    }

    #[test]
    fn an_empty_book_is_idle() {
        let mut book = Book::<u32>::new(8);
        assert_eq!(book.next(|_| true), Next::Idle);
        assert!(book.is_empty());
    }

    #[test]
    fn a_job_that_fits_joins_whole_in_one_part() {
        let mut book = Book::new(8);
        let job = book.add(5);
        assert_eq!(book.next(|_| true), Next::Join(part(job, 0, 5)));
        book.joined(part(job, 0, 5), 1u32);
        assert_eq!(book.next(|_| true), Next::Idle);
        assert_eq!(book.parts_in_flight(), 1);
    }

    #[test]
    fn jobs_join_in_arrival_order() {
        let mut book = Book::new(8);
        let (a, b, c) = (book.add(2), book.add(3), book.add(1));
        let (mut room, mut ticket) = (8, 0);
        let parts = join_all(&mut book, &mut room, &mut ticket);
        assert_eq!(parts, vec![part(a, 0, 2), part(b, 0, 3), part(c, 0, 1)]);
    }

    #[test]
    fn a_job_larger_than_the_capacity_joins_in_parts_of_the_capacity() {
        let mut book = Book::new(4);
        let job = book.add(10);
        let (mut room, mut ticket) = (usize::MAX, 0);
        let parts = join_all(&mut book, &mut room, &mut ticket);
        assert_eq!(
            parts,
            vec![part(job, 0, 4), part(job, 4, 4), part(job, 8, 2)]
        );
    }

    #[test]
    fn the_rest_of_a_job_joined_in_part_joins_before_the_jobs_waiting() {
        let mut book = Book::new(4);
        let big = book.add(6);
        let small = book.add(1);
        let (mut room, mut ticket) = (4, 0);
        assert_eq!(
            join_all(&mut book, &mut room, &mut ticket),
            vec![part(big, 0, 4)]
        );
        // The small job would fit the room left, but the big one's rest comes first.
        assert_eq!(book.next(|n| n <= 1), Next::Wait);
        assert_eq!(finish(&mut book, 0), None);
        let (mut room, mut ticket) = (4, 1);
        assert_eq!(
            join_all(&mut book, &mut room, &mut ticket),
            vec![part(big, 4, 2), part(small, 0, 1)]
        );
    }

    #[test]
    fn a_part_that_does_not_fit_waits_while_keys_are_in_flight() {
        let mut book = Book::new(8);
        let a = book.add(6);
        let b = book.add(6);
        assert_eq!(join_next(&mut book, 0), part(a, 0, 6));
        assert_eq!(book.next(|n| n <= 2), Next::Wait);
        assert_eq!(
            finish(&mut book, 0),
            Some(Done {
                job: a,
                failed: false
            })
        );
        assert_eq!(book.next(|n| n <= 8), Next::Join(part(b, 0, 6)));
    }

    #[test]
    fn a_part_that_does_not_fit_an_empty_rotation_is_too_large() {
        let mut book = Book::<u32>::new(8);
        let job = book.add(8);
        assert_eq!(book.next(|n| n <= 3), Next::TooLarge(part(job, 0, 8)));
        assert_eq!(book.failed(job), Some(Done { job, failed: true }));
        assert!(book.is_empty());
    }

    #[test]
    fn a_job_is_done_only_when_every_part_finished() {
        let mut book = Book::new(2);
        let job = book.add(5);
        let (mut room, mut ticket) = (usize::MAX, 10);
        assert_eq!(join_all(&mut book, &mut room, &mut ticket).len(), 3);
        assert_eq!(finish(&mut book, 10), None);
        assert_eq!(finish(&mut book, 11), None);
        assert_eq!(finish(&mut book, 12), Some(Done { job, failed: false }));
        assert!(book.is_empty());
    }

    #[test]
    fn parts_may_finish_in_any_order() {
        let mut book = Book::new(2);
        let job = book.add(4);
        let (mut room, mut ticket) = (usize::MAX, 0);
        join_all(&mut book, &mut room, &mut ticket);
        assert_eq!(finish(&mut book, 1), None);
        assert_eq!(finish(&mut book, 0), Some(Done { job, failed: false }));
    }

    #[test]
    fn a_job_not_whole_is_not_done_when_its_parts_in_flight_finish() {
        let mut book = Book::new(2);
        let job = book.add(3);
        assert_eq!(join_next(&mut book, 0), part(job, 0, 2));
        assert_eq!(finish(&mut book, 0), None, "one key has not joined yet");
        assert_eq!(book.next(|_| true), Next::Join(part(job, 2, 1)));
    }

    #[test]
    fn a_failed_join_with_nothing_in_flight_is_done_at_once() {
        let mut book = Book::<u32>::new(8);
        let job = book.add(3);
        let next = book.add(1);
        assert_eq!(book.next(|_| true), Next::Join(part(job, 0, 3)));
        assert_eq!(book.failed(job), Some(Done { job, failed: true }));
        assert_eq!(book.next(|_| true), Next::Join(part(next, 0, 1)));
    }

    #[test]
    fn a_failed_job_joins_nothing_more_and_is_done_when_its_parts_are() {
        let mut book = Book::new(2);
        let job = book.add(6);
        join_next(&mut book, 7);
        assert_eq!(book.next(|_| true), Next::Join(part(job, 2, 2)));
        assert_eq!(book.failed(job), None, "a part is still in flight");
        assert_eq!(book.next(|_| true), Next::Idle);
        assert_eq!(finish(&mut book, 7), Some(Done { job, failed: true }));
    }

    #[test]
    fn a_stop_hands_back_the_jobs_not_joined_at_all() {
        let mut book = Book::new(4);
        let joined = book.add(2);
        join_next(&mut book, 0);
        let (a, b) = (book.add(1), book.add(1));
        assert_eq!(book.next(|_| false), Next::Wait); // `a` is the joining job, none joined
        assert_eq!(book.stop(), vec![a, b]);
        assert_eq!(book.next(|_| true), Next::Idle);
        assert_eq!(
            finish(&mut book, 0),
            Some(Done {
                job: joined,
                failed: false
            })
        );
        assert!(book.is_empty());
    }

    #[test]
    fn a_stop_keeps_a_job_joined_in_part_joining_until_whole() {
        let mut book = Book::new(2);
        let job = book.add(5);
        let waiting = book.add(1);
        join_next(&mut book, 0);
        assert_eq!(book.stop(), vec![waiting]);
        assert_eq!(book.next(|_| true), Next::Join(part(job, 2, 2)));
    }

    #[test]
    fn waiting_keys_count_only_the_jobs_not_joining() {
        let mut book = Book::<u32>::new(4);
        book.add(3);
        book.add(5);
        assert_eq!(book.waiting_keys(), 8);
        let _ = book.next(|_| false);
        assert_eq!(book.waiting_keys(), 5);
    }

    #[test]
    fn an_unknown_ticket_finishes_nothing() {
        let mut book = Book::new(4);
        let job = book.add(1);
        join_next(&mut book, 1);
        assert_eq!(book.finished(&2, false), None);
        assert_eq!(finish(&mut book, 1), Some(Done { job, failed: false }));
        assert_eq!(book.finished(&1, false), None, "a ticket finishes once");
    }

    #[test]
    fn a_finished_part_says_which_keys_it_held() {
        let mut book = Book::new(2);
        let job = book.add(3);
        join_next(&mut book, 4);
        join_next(&mut book, 5);
        assert_eq!(book.finished(&5, false), Some((part(job, 2, 1), None)));
        assert_eq!(
            book.finished(&4, false),
            Some((part(job, 0, 2), Some(Done { job, failed: false })))
        );
    }

    #[test]
    fn a_part_that_finished_without_answers_fails_its_job() {
        let mut book = Book::new(2);
        let job = book.add(6);
        let next = book.add(1);
        join_next(&mut book, 0);
        join_next(&mut book, 1);
        assert_eq!(book.finished(&0, true), Some((part(job, 0, 2), None)));
        // The failed job's last two keys never join; the next job does.
        assert_eq!(book.next(|_| true), Next::Join(part(next, 0, 1)));
        assert_eq!(finish(&mut book, 1), Some(Done { job, failed: true }));
    }

    #[test]
    fn the_last_part_failing_makes_its_job_done_and_failed() {
        let mut book = Book::new(4);
        let job = book.add(2);
        join_next(&mut book, 9);
        assert_eq!(
            book.finished(&9, true),
            Some((part(job, 0, 2), Some(Done { job, failed: true })))
        );
        assert!(book.is_empty());
    }
}
