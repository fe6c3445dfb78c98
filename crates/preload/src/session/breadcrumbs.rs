//! Breadcrumbs (CUBLASGUARD_SYNC=deferred): after a guarded call, its sequence number is
//! written by its own stream, in stream order, into a word of pinned host memory the device
//! can write (one page per CUDA context, one word per stream). Reading the words needs no
//! synchronisation: the last number that landed on a stream is the last call there that
//! completed. When an asynchronous error surfaces, the first call on a stream whose breadcrumb
//! did not land is the call that faulted, or comes right after the kernel that did.
//!
//! This module keeps what was issued and reads what landed; the FFI layer allocates the pages
//! and enqueues the writes (`ffi::cuda_client::breadcrumbs`). Safe Rust: a page's words are
//! atomics the FFI layer hands over for the life of the process.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::call_site::CallSite;

/// Words in one context's page: the streams of that context the guard can follow.
pub const SLOTS_PER_PAGE: usize = 512;
/// Contexts followed (a process with more devices than this is followed on the first ones).
const MAX_CONTEXTS: usize = 16;
/// Unlanded breadcrumbs remembered per stream: a stream further behind than this loses its
/// oldest, and its first unfinished call is then known only as "earlier than" the oldest kept.
const ISSUED_KEPT: usize = 256;

/// A breadcrumb issued and not yet seen landed: the call's number, hooked function, and where
/// the program made it (the call a late asynchronous error is pinned to is named by its own
/// line, not the line where the error surfaced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Issued {
    pub seq: u64,
    pub hook: u16,
    pub site: CallSite,
}

impl Issued {
    #[cfg(test)]
    pub fn new(seq: u64, hook: u16) -> Self {
        Self { seq, hook, site: CallSite::default() }
    }
}

struct Trail {
    stream: u64,
    /// In the order the writes were enqueued on the stream (which is the order they land).
    issued: VecDeque<Issued>,
    /// Breadcrumbs dropped from `issued` before they landed (the stream was too far behind).
    forgotten: u64,
}

struct Page {
    context: u64,
    /// The mapped words, as the host sees them; empty when the page could not be had (then
    /// this context gets no breadcrumbs, and its calls synchronise as in `gemm` mode).
    words: &'static [AtomicU64],
    /// The device address of `words[0]`.
    device: u64,
    trails: Vec<Trail>,
}

impl Page {
    fn landed(&self, slot: usize) -> u64 {
        self.words.get(slot).map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// Forgets what landed on the trail in `slot`: every breadcrumb up to the one whose number
    /// is in the word.
    fn settle(&mut self, slot: usize) {
        let landed = self.landed(slot);
        if let Some(trail) = self.trails.get_mut(slot) {
            if let Some(at) = trail.issued.iter().position(|i| i.seq == landed) {
                trail.issued.drain(..=at);
                // The forgotten ones were enqueued before it: they landed too.
                trail.forgotten = 0;
            }
        }
    }
}

/// How far one stream had got, read without synchronising.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub context: u64,
    pub stream: u64,
    /// The last guarded call whose breadcrumb landed (0: none yet).
    pub landed: u64,
    /// The first issued breadcrumb that has not landed.
    pub first_unfinished: Option<Issued>,
    /// Issued breadcrumbs that have not landed, the forgotten ones included.
    pub unfinished: u64,
}

#[derive(Default)]
pub struct Breadcrumbs {
    pages: Mutex<Vec<Page>>,
}

impl Breadcrumbs {
    /// Whether `context` has a page (or was refused one: it is not asked for twice).
    pub fn knows(&self, context: u64) -> bool {
        self.pages.lock().iter().any(|p| p.context == context)
    }

    /// Gives `context` its page: `words` as the host reads them, at device address `device`
    /// (`words` empty: none could be had). False when the table of contexts is full.
    pub fn add_page(&self, context: u64, words: &'static [AtomicU64], device: u64) -> bool {
        let mut pages = self.pages.lock();
        if pages.iter().any(|p| p.context == context) {
            return true;
        }
        if pages.len() >= MAX_CONTEXTS {
            return false;
        }
        pages.push(Page { context, words, device, trails: Vec::new() });
        true
    }

    /// Issues the breadcrumb of call `seq` on `stream` of `context`: the device address its
    /// number is to be written to. `None`: the context has no page or no free word; the call
    /// then goes without one.
    pub fn issue(&self, context: u64, stream: u64, issued: Issued) -> Option<u64> {
        let mut pages = self.pages.lock();
        let page = pages.iter_mut().find(|p| p.context == context)?;
        if page.words.is_empty() {
            return None;
        }
        let slot = match page.trails.iter().position(|t| t.stream == stream) {
            Some(slot) => slot,
            None if page.trails.len() < page.words.len().min(SLOTS_PER_PAGE) => {
                page.trails.push(Trail { stream, issued: VecDeque::with_capacity(ISSUED_KEPT), forgotten: 0 });
                page.trails.len() - 1
            }
            None => return None,
        };
        page.settle(slot);
        let trail = &mut page.trails[slot];
        if trail.issued.len() >= ISSUED_KEPT {
            trail.issued.pop_front();
            trail.forgotten += 1;
        }
        trail.issued.push_back(issued);
        Some(page.device + 8 * slot as u64)
    }

    /// Takes back the breadcrumb of call `seq` on `stream`, whose write could not be enqueued.
    pub fn withdraw(&self, context: u64, stream: u64, seq: u64) {
        let mut pages = self.pages.lock();
        let Some(page) = pages.iter_mut().find(|p| p.context == context) else { return };
        if let Some(trail) = page.trails.iter_mut().find(|t| t.stream == stream) {
            if trail.issued.back().is_some_and(|i| i.seq == seq) {
                trail.issued.pop_back();
            }
        }
    }

    /// Every followed stream's progress, as of now.
    pub fn progress(&self) -> Vec<Progress> {
        let mut pages = self.pages.lock();
        let mut out = Vec::new();
        for page in pages.iter_mut() {
            for slot in 0..page.trails.len() {
                page.settle(slot);
                let trail = &page.trails[slot];
                out.push(Progress {
                    context: page.context,
                    stream: trail.stream,
                    landed: page.landed(slot),
                    first_unfinished: if trail.forgotten > 0 { None } else { trail.issued.front().copied() },
                    unfinished: trail.issued.len() as u64 + trail.forgotten,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page of `n` words, as the device would write them (the test writes them itself).
    fn page(n: usize) -> &'static [AtomicU64] {
        Box::leak((0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>().into_boxed_slice())
    }

    #[test]
    fn each_stream_gets_its_own_word_and_the_first_unlanded_call_is_the_first_unfinished() {
        let crumbs = Breadcrumbs::default();
        let words = page(4);
        assert!(crumbs.add_page(1, words, 0x1000));
        assert_eq!(crumbs.issue(1, 0, Issued::new(3, 7)), Some(0x1000));
        assert_eq!(crumbs.issue(1, 0xabc, Issued::new(4, 7)), Some(0x1008));
        assert_eq!(crumbs.issue(1, 0, Issued::new(5, 8)), Some(0x1000));
        words[0].store(3, Ordering::Release); // call 3 landed on stream 0, call 5 did not
        words[1].store(4, Ordering::Release);
        let p = crumbs.progress();
        assert_eq!(p[0], Progress { context: 1, stream: 0, landed: 3, first_unfinished: Some(Issued::new(5, 8)), unfinished: 1 });
        assert_eq!(p[1], Progress { context: 1, stream: 0xabc, landed: 4, first_unfinished: None, unfinished: 0 });
    }

    #[test]
    fn a_context_without_a_page_or_without_free_words_issues_nothing() {
        let crumbs = Breadcrumbs::default();
        assert_eq!(crumbs.issue(1, 0, Issued::new(1, 0)), None, "no page");
        assert!(crumbs.add_page(2, &[], 0));
        assert!(crumbs.knows(2));
        assert_eq!(crumbs.issue(2, 0, Issued::new(1, 0)), None, "refused a page");
        assert!(crumbs.add_page(3, page(1), 0x2000));
        assert_eq!(crumbs.issue(3, 0, Issued::new(1, 0)), Some(0x2000));
        assert_eq!(crumbs.issue(3, 9, Issued::new(2, 0)), None, "one word, taken by stream 0");
    }

    #[test]
    fn a_withdrawn_breadcrumb_is_not_waited_for() {
        let crumbs = Breadcrumbs::default();
        crumbs.add_page(1, page(2), 0x1000);
        crumbs.issue(1, 0, Issued::new(1, 0));
        crumbs.withdraw(1, 0, 1);
        assert_eq!(crumbs.progress()[0].unfinished, 0);
    }

    #[test]
    fn a_stream_too_far_behind_names_no_first_unfinished_call_rather_than_a_wrong_one() {
        let crumbs = Breadcrumbs::default();
        let words = page(1);
        crumbs.add_page(1, words, 0x1000);
        for seq in 1..=(ISSUED_KEPT as u64 + 1) {
            crumbs.issue(1, 0, Issued::new(seq, 0));
        }
        let p = crumbs.progress()[0];
        assert_eq!((p.first_unfinished, p.unfinished), (None, ISSUED_KEPT as u64 + 1));
        // Once one it kept lands, the forgotten ones landed before it.
        words[0].store(ISSUED_KEPT as u64, Ordering::Release);
        let p = crumbs.progress()[0];
        assert_eq!((p.first_unfinished.map(|i| i.seq), p.unfinished), (Some(ISSUED_KEPT as u64 + 1), 1));
    }

    #[test]
    fn breadcrumbs_land_in_enqueue_order_even_when_numbers_do_not_increase() {
        // Two threads on one stream: call 6 enqueued its write before call 5 did.
        let crumbs = Breadcrumbs::default();
        let words = page(1);
        crumbs.add_page(1, words, 0x1000);
        crumbs.issue(1, 0, Issued::new(6, 0));
        crumbs.issue(1, 0, Issued::new(5, 0));
        words[0].store(6, Ordering::Release);
        assert_eq!(crumbs.progress()[0].first_unfinished.map(|i| i.seq), Some(5));
        words[0].store(5, Ordering::Release);
        assert_eq!(crumbs.progress()[0].unfinished, 0);
    }
}
