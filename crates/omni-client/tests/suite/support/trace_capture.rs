//! What one test thread logs, captured while the other tests of the binary run in parallel
//! (omni-client's suite and the operator's unit tests include this file by path).
//!
//! A subscriber set for the test's thread alone (`tracing::subscriber::set_default`) loses
//! events at random in such a binary: tracing caches every callsite's interest for the whole
//! process, and while that subscriber is the only one registered, a callsite that another
//! thread reaches first is judged by that thread's own default (none) and cached as disabled
//! for every thread. One global subscriber keeps every callsite's interest the same on every
//! thread; it formats an event only on a thread that captures, into that thread's buffer.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, Once};

use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::prelude::*;

type Buffer = Arc<Mutex<Vec<u8>>>;

thread_local! {
    static SINK: RefCell<Option<Buffer>> = const { RefCell::new(None) };
}

/// The events of this thread from [`this_thread`] until it is dropped.
pub(crate) struct Capture {
    buffer: Buffer,
}

/// Starts capturing what this thread logs. `filter` (an `EnvFilter` directive) is the first
/// caller's and holds for the whole binary. Everything a test observes must run on its own
/// thread: a `current_thread` runtime, whose spawned tasks run there too.
pub(crate) fn this_thread(filter: &str) -> Capture {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let capturing = filter_fn(|_| SINK.with(|sink| sink.borrow().is_some()));
        let format = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(|| ThreadWriter)
            .with_filter(capturing);
        tracing_subscriber::registry()
            .with(EnvFilter::new(filter))
            .with(format)
            .try_init()
            .unwrap_or_else(|e| panic!("another global subscriber is installed: {e}"));
    });
    let buffer = Buffer::default();
    SINK.with(|sink| *sink.borrow_mut() = Some(buffer.clone()));
    Capture { buffer }
}

impl Capture {
    /// What was captured so far.
    pub(crate) fn text(&self) -> String {
        let bytes = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        SINK.with(|sink| *sink.borrow_mut() = None);
    }
}

/// Writes to the buffer of the thread that formats the event.
struct ThreadWriter;

impl std::io::Write for ThreadWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        SINK.with(|sink| {
            if let Some(buffer) = sink.borrow().as_ref() {
                buffer
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
