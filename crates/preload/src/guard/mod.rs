//! The policy core: what the guard does around each hooked call, in safe Rust. A handler gets
//! one `Call`, which numbers the call, forwards it, records it in the flight recorder, and
//! turns findings into faults. Everything the guard asks of CUDA goes through `check::Device`;
//! everything that leaves the process (stderr, the trace on disk, abort) through `Outlet`; what
//! the calling thread tells (its stack, call site, Python frames) through `Caller`. The FFI
//! layer supplies the real ones; the tests here supply models; a verdict judged later is given
//! what was kept at its call as its caller (`verdicts::LateCaller`).

#![forbid(unsafe_code)]

pub(crate) mod attribution;
pub(crate) mod blas;
pub(crate) mod cudnn;
pub(crate) mod dump;
pub(crate) mod gemm;
pub(crate) mod graphs;
pub(crate) mod handles;
pub(crate) mod hang;
pub(crate) mod launch;
pub(crate) mod launch_pointers;
pub(crate) mod lt;
pub(crate) mod memory;
pub(crate) mod operand_call;
pub(crate) mod origin;
pub(crate) mod parameters;
pub(crate) mod sync;
pub(crate) mod verdicts;

use std::cell::Cell;

use crate::check::{hardware, init, Device, Finding};
use crate::config::OnFault;
use crate::ignore::IgnoreRule;
use crate::recorder::{CallArgs, RecordedCall};
use crate::session::call_site::{CallSite, HookFrame};
use crate::session::{KnownError, Recorded, Session};
use crate::state::{AllocationView, ThreadMemo};
use crate::trace::{CudaErrorRecord, Fault, FaultKind, MemoryState};

pub(crate) use crate::Hook;

/// Where the guard's findings go, and what the process can tell about them. The real outlet
/// writes stderr and the trace, and aborts; the tests' outlet keeps what it was given. What the
/// calling thread can tell (its stack, its Python frames) is the `Caller`, apart: a verdict
/// judged later is given the facts kept at its call as its caller, and the same outlet.
pub(crate) trait Outlet {
    /// Publishes what became of a fault: its stderr lines, the stored fault itself (for the
    /// crash writer), and a rewrite of the trace on disk when one is due.
    fn publish(&self, session: &Session, recorded: &Recorded);
    /// A call site kept at its call, as `Caller::backtrace` gives frames: each named when a
    /// fault is written.
    fn describe_call_site(&self, site: &CallSite) -> Vec<String>;
    /// Ends the process (CUBLASGUARD_ON_FAULT=abort). The real one does not return.
    fn abort(&self);
    /// Monotonic enough wall time, in nanoseconds.
    fn now_ns(&self) -> u64;
    /// The frames at `places`, kept by a thread that still waits, named.
    fn describe_python_places(&self, places: &crate::session::waits::PythonPlaces) -> Vec<crate::trace::PythonFrame>;
    /// The GPU's health as of now (NVML's readings and events, the kernel log's Xid lines),
    /// waiting briefly for fresh readings; `None` where nothing can be read.
    fn gpu_health(&self) -> Option<crate::gpu_health::GpuHealth>;
    /// A kernel's name from its host stub's address (the runtime's cudaFuncGetName, else the
    /// stub's symbol, demangled); asked once per address, at a fault or when writing the trace.
    fn kernel_name(&self, _func: u64) -> Option<String> {
        None
    }
    /// Writes a new file `dir/NAME.EXT` (`NAME-2.EXT` and on when taken) with what `fill` writes,
    /// whole or not at all, and returns its path.
    fn create_file(
        &self,
        _dir: &str,
        _name: &str,
        _extension: &str,
        _fill: &mut dyn FnMut(&mut std::io::BufWriter<&std::fs::File>) -> std::io::Result<()>,
    ) -> std::io::Result<String> {
        Err(std::io::Error::other("this outlet writes no files"))
    }
}

/// The thread a call was made on, as its faults tell it: its stack, its call site, its id and
/// its Python frames. The real one reads the calling thread; a verdict judged later answers
/// from what was kept at its call (`verdicts::LateCaller`).
pub(crate) trait Caller {
    /// The native call stack at the fault, without the guard's frames.
    fn backtrace(&self) -> Vec<String>;
    /// The return addresses of the hook whose frame is `frame`, read while it runs (a few
    /// loads): kept at a call whose verdict may be judged after it returns.
    fn call_site(&self, frame: HookFrame) -> CallSite;
    /// The calling thread's kernel id.
    fn thread_id(&self) -> u32;
    /// The calling thread's Python frames (innermost first), or why it has none, and its name;
    /// `None` when the process runs no Python. Takes the GIL: call with no lock held.
    fn python_stack(&self) -> Option<(Vec<crate::trace::PythonFrame>, Option<String>, String)> {
        None
    }
    /// As `python_stack`, the innermost frames only, read only if the calling thread holds the
    /// GIL (never waiting for it): kept at a call whose NaN/Inf verdict is judged later.
    fn python_frames_at_call(&self) -> Option<KeptFrames>;
    /// Where the calling thread's innermost Python frames are, as numbers (a few loads, no GIL,
    /// no allocation): kept with a wait the hang watchdog may name.
    fn python_places(&self) -> crate::session::waits::PythonPlaces;
}

/// The Python frames kept at a call whose verdict is judged later.
#[derive(Clone, Debug)]
pub(crate) enum KeptFrames {
    /// The frames (innermost first), why there are none, and the thread's name.
    Read(Vec<std::sync::Arc<crate::trace::PythonFrame>>, Option<String>, String),
    /// The thread had released the GIL, and this Python's frames cannot be read without it.
    GilReleased,
}

/// One intercepted call, from its number to its faults. `R` is what the hooked function returns.
pub(crate) struct Call<'a, R: Copy> {
    pub session: &'a Session,
    pub hook: Hook,
    pub seq: u64,
    pub device: &'a dyn Device,
    pub outlet: &'a dyn Outlet,
    pub caller: &'a dyn Caller,
    /// What the calling thread remembers of the shared tables (handed down from the thread's
    /// one block of thread-local state, so the checks reach no thread-local of their own).
    pub memo: &'a ThreadMemo,
    forward: &'a dyn Fn() -> R,
    recorded: Cell<bool>,
    /// When the hook was entered: the recorder keeps each call's duration (the timeline).
    started_ns: u64,
    /// The calling thread's kernel id, for the recorder.
    thread: u32,
    /// The hook's own frame, for the call site a verdict judged later keeps.
    frame: HookFrame,
    /// The call site once read: a deferred call asks for it twice (its breadcrumb, its
    /// verdict), and the frame-pointer chain is walked once.
    site: Cell<Option<CallSite>>,
    /// A matrix multiply the hook layer already forwarded on its lean path (every check off)
    /// and that failed: its status and the sticky error known before it. The handler guards
    /// it as if it had just forwarded it, without calling the real function again.
    pub ran: Option<(i32, Option<KnownError>)>,
}

/// The calling thread as a call sees it: its kernel id and its memo of the shared tables.
#[derive(Clone, Copy)]
pub(crate) struct OnThread<'a> {
    pub id: u32,
    pub memo: &'a ThreadMemo,
    pub frame: HookFrame,
}

impl<'a, R: Copy> Call<'a, R> {
    /// Counts the call and gives it its sequence number.
    #[allow(clippy::too_many_arguments)]
    pub fn begin(
        session: &'a Session,
        hook: Hook,
        device: &'a dyn Device,
        outlet: &'a dyn Outlet,
        caller: &'a dyn Caller,
        forward: &'a dyn Fn() -> R,
        thread: OnThread<'a>,
    ) -> Self {
        let seq = session.begin(hook.index());
        let started_ns = outlet.now_ns();
        Self::on_thread(session, hook, seq, started_ns, (device, outlet, caller), forward, thread, None)
    }

    /// A call the hook layer already numbered, timed and forwarded (`ran`), handed to its
    /// handler because it failed: the handler describes it for its fault.
    #[allow(clippy::too_many_arguments)]
    pub fn resumed(
        session: &'a Session,
        hook: Hook,
        seq: u64,
        started_ns: u64,
        device: &'a dyn Device,
        (outlet, caller): (&'a dyn Outlet, &'a dyn Caller),
        forward: &'a dyn Fn() -> R,
        thread: OnThread<'a>,
        ran: (i32, Option<KnownError>),
    ) -> Self {
        Self::on_thread(session, hook, seq, started_ns, (device, outlet, caller), forward, thread, Some(ran))
    }

    /// A call made on `thread`, not yet recorded (`begin`, `resumed`).
    #[allow(clippy::too_many_arguments)]
    fn on_thread(
        session: &'a Session,
        hook: Hook,
        seq: u64,
        started_ns: u64,
        (device, outlet, caller): (&'a dyn Device, &'a dyn Outlet, &'a dyn Caller),
        forward: &'a dyn Fn() -> R,
        thread: OnThread<'a>,
        ran: Option<(i32, Option<KnownError>)>,
    ) -> Self {
        Self {
            session,
            hook,
            seq,
            device,
            outlet,
            caller,
            memo: thread.memo,
            forward,
            recorded: Cell::new(false),
            started_ns,
            thread: thread.id,
            frame: thread.frame,
            site: Cell::new(None),
            ran,
        }
    }

    /// A call judged after it returned (a deferred verdict), by its number: neither counted nor
    /// recorded again; its faults are built and published as at the call.
    #[allow(clippy::too_many_arguments)]
    pub fn judged_later(
        session: &'a Session,
        hook: Hook,
        seq: u64,
        device: &'a dyn Device,
        outlet: &'a dyn Outlet,
        caller: &'a dyn Caller,
        forward: &'a dyn Fn() -> R,
        memo: &'a ThreadMemo,
    ) -> Self {
        Self {
            session,
            hook,
            seq,
            device,
            outlet,
            caller,
            memo,
            forward,
            recorded: Cell::new(true),
            started_ns: 0,
            thread: 0,
            frame: HookFrame::default(),
            site: Cell::new(None),
            ran: None,
        }
    }

    /// A call that is neither counted nor recorded (a kernel registration): sequence number 0.
    pub fn uncounted(
        session: &'a Session,
        hook: Hook,
        device: &'a dyn Device,
        (outlet, caller): (&'a dyn Outlet, &'a dyn Caller),
        forward: &'a dyn Fn() -> R,
        memo: &'a ThreadMemo,
    ) -> Self {
        Self::judged_later(session, hook, 0, device, outlet, caller, forward, memo)
    }

    /// The live allocations, looked up through this thread's memo.
    pub fn allocations(&self) -> AllocationView<'a> {
        AllocationView::new(&self.session.allocations, self.memo)
    }

    /// The real function, with the program's arguments.
    pub fn forward(&self) -> R {
        (self.forward)()
    }

    pub fn api(&self) -> &'static str {
        self.hook.name()
    }

    /// Where the program made this call (return addresses, read now, while the hook's frame
    /// is live), for a verdict judged after it returns.
    pub fn call_site(&self) -> CallSite {
        if let Some(site) = self.site.get() {
            return site;
        }
        let site = self.caller.call_site(self.frame);
        self.site.set(Some(site));
        site
    }

    /// The calling thread's kernel id.
    pub fn thread(&self) -> u32 {
        self.thread
    }

    /// This call's breadcrumb, with where the program made it.
    pub fn issued(&self) -> crate::session::breadcrumbs::Issued {
        crate::session::breadcrumbs::Issued { seq: self.seq, hook: self.hook.index() as u16, site: self.call_site() }
    }

    /// Enters the call in the flight recorder with how it ended.
    pub fn record(&self, status: i32, args: CallArgs) {
        self.record_call(status, args, false, false);
    }

    /// `captured`: the call's stream was capturing a CUDA graph (the call was recorded into it).
    pub fn record_call(&self, status: i32, args: CallArgs, scanned: bool, captured: bool) {
        if status != 0 {
            self.failed_after_unattributed_error();
        }
        self.recorded.set(true);
        let time_ns = self.outlet.now_ns();
        let call = RecordedCall {
            seq: self.seq,
            hook: self.hook.index() as u16,
            status,
            time_ns,
            duration_ns: time_ns.saturating_sub(self.started_ns),
            thread: self.thread,
            args,
            scanned,
            captured,
        };
        self.session.recorder.record(&call);
    }

    /// A hooked call that returned an error, whatever its library, may have failed because of
    /// a kernel fault the default mode has not attributed yet: the streams whose breadcrumbs
    /// are out are asked now, before the call's own fault (if its handler makes one) is built,
    /// so the fault is on the call that caused it before anything is written and the failing
    /// call's story starts from it ("the CUDA context has been unusable since ..."), as in
    /// gemm mode. Every call is recorded, so this is the one place every hook passes.
    #[cold]
    #[inline(never)]
    fn failed_after_unattributed_error(&self) {
        attribution::attribute_pending(self);
    }

    /// Whether the handler entered the call in the recorder (the hook layer records the
    /// calls of handlers that did not, so no call is ever missing from it).
    pub fn was_recorded(&self) -> bool {
        self.recorded.get()
    }

    /// A fault with the facts every kind shares; the caller adds what is specific to its call.
    /// What costs (the device's memory query, the native backtrace, the Python frames) is
    /// added by `report`, only to a fault that is stored: not to one past the cap, one an
    /// ignore rule keeps out, or the amendment of one reported before its call ran (which keeps
    /// the backtrace and memory state of the moment of the fault).
    pub fn fault(&self, finding: Finding, status: i32, status_name: &str) -> Fault {
        let totals = self.session.allocations.totals();
        let error = finding.error.map(|(code, call)| CudaErrorRecord { code, name: crate::cuda::cuda_error_name(code).to_string(), call: call.to_string() });
        Fault {
            error,
            thread: self.caller.thread_id(),
            time_ns: self.outlet.now_ns(),
            memory: Some(MemoryState { free: None, total: None, tracked_live_bytes: totals.bytes, tracked_live_count: totals.count }),
            message: finding.message,
            ..Fault::new(self.seq, self.api(), finding.kind, "", status, status_name)
        }
    }

    /// Records a fault: the session counts it, the outlet publishes it, and abort mode ends
    /// the process.
    pub fn report(&self, fault: Fault) {
        self.report_from(fault, true)
    }

    /// As `report`, for a fault recorded on another thread than its call's (the hang
    /// watchdog's): its Python frames are the ones it already carries, kept at the call, not
    /// the reporting thread's.
    pub fn report_keeping_python(&self, fault: Fault) {
        self.report_from(fault, false)
    }

    fn report_from(&self, mut fault: Fault, reporters_python: bool) {
        let s = self.session;
        // Past the cap a fault is only counted: a backtrace and a memory query would be wasted.
        let kept = !s.faults_full();
        let rules_read_python = s.config.ignore.iter().any(IgnoreRule::reads_python);
        if kept && rules_read_python && reporters_python {
            self.add_python_stack(&mut fault);
        }
        // A fault the user declared benign is counted under its rule, and goes no further.
        if !s.config.ignore.is_empty() && s.ignores(&fault).is_some() {
            return;
        }
        if kept {
            if !rules_read_python && reporters_python {
                self.add_python_stack(&mut fault);
            }
            self.add_moment(&mut fault);
        }
        if self.architecture_may_explain(&fault) {
            fault.device = self.device.compute_capability().map(|(major, minor)| crate::trace::DeviceRecord { compute_capability: format!("{major}.{minor}") });
        }
        let mut recorded = s.add_fault(fault, self.outlet.now_ns());
        let abort = s.config.on_fault == OnFault::Abort;
        recorded.rewrite |= abort; // on disk before the process ends
        self.outlet.publish(s, &recorded);
        if abort {
            self.outlet.abort();
        }
    }

    /// The faulting thread's Python frames (takes the GIL: no lock of the guard's is held here).
    fn add_python_stack(&self, fault: &mut Fault) {
        if let Some((frames, note, thread)) = self.caller.python_stack() {
            fault.python_stack = frames;
            fault.python_stack_note = note;
            fault.thread_name = (!thread.is_empty()).then_some(thread);
        }
    }

    /// The device's free and total memory (unless the context is broken or CUDA never
    /// started) and the native backtrace, as they are at the fault.
    fn add_moment(&self, fault: &mut Fault) {
        let s = self.session;
        if s.known_error().is_none() && s.driver_error().is_none() {
            if let (Some((free, total)), Some(memory)) = (self.device.memory_info(), fault.memory.as_mut()) {
                (memory.free, memory.total) = (Some(free), Some(total));
            }
        }
        // One given already is the call's own, kept at it (a verdict judged later): the
        // stack of now is another call's.
        if fault.backtrace.is_empty() {
            fault.backtrace = self.caller.backtrace();
        }
        if hardware::wants_health(fault) {
            fault.gpu_health = self.outlet.gpu_health().filter(hardware::worth_recording);
            hardware::attribute(fault);
        }
    }

    /// Faults that a build without kernels for the device's architecture explains: no kernel
    /// image (209), ARCH_MISMATCH (8; for the runtime, an invalid device function), and
    /// EXECUTION_FAILED at the process's first GEMM.
    fn architecture_may_explain(&self, fault: &Fault) -> bool {
        const NO_KERNEL_IMAGE: i32 = 209;
        const ARCH_MISMATCH: i32 = 8;
        let code = fault.error.as_ref().map(|e| e.code);
        fault.status == NO_KERNEL_IMAGE
            || code == Some(NO_KERNEL_IMAGE)
            || fault.status == ARCH_MISMATCH
            || (fault.status == crate::cuda::CUBLAS_EXECUTION_FAILED && self.session.first_matmul() == Some(fault.seq))
    }

    /// Brings a fault reported before its call ran up to date with how the call ended.
    pub fn amend(&self, fault: Fault) {
        if let Some(index) = self.session.replace_fault(fault) {
            self.published(index);
        }
    }

    /// Publishes stored fault `index` again, replaced in place.
    pub fn published(&self, index: usize) {
        let recorded = Recorded { stored: true, index: Some(index), lines: Vec::new(), rewrite: false };
        self.outlet.publish(self.session, &recorded);
    }

    /// Reports that CUDA could not start, once per hooked function (without a driver every call
    /// fails the same way), with the cause found by asking the driver.
    pub fn report_init_failure(&self, status: i32, status_name: &str, device_count: Option<(i32, Option<i32>)>) {
        if let Some(fault) = self.init_failure(status, status_name, device_count) {
            self.report(fault);
        }
    }

    /// The `init_failed` fault of this call with its cause, the first time this hooked function
    /// fails to start CUDA (`None` after that).
    fn init_failure(&self, status: i32, status_name: &str, device_count: Option<(i32, Option<i32>)>) -> Option<Fault> {
        let s = self.session;
        if !s.first_init_failure(self.hook.index()) {
            return None;
        }
        attribution::attribute_pending(self);
        // The program's own cudaGetDeviceCount answer, if it asked, beats asking again (a
        // pending error would stop the guard from asking without disturbing it).
        let probe = self.device.probe_driver(device_count.or_else(|| s.device_count()));
        let cause = init::explain(&probe, &self.init_context(false));
        s.set_driver_error(cause.message.clone());
        let finding =
            Finding::new(FaultKind::InitFailed, format!("returned {status_name} ({status}): {}", init::after_status(&cause.message, status_name, status)));
        let mut fault = self.fault(finding, status, status_name);
        fault.cause = Some(cause);
        Some(fault)
    }

    /// A capability probe (`cudaGetDeviceCount`) that found no driver or no device. Programs
    /// ask it to choose between CUDA and the CPU, so this is a note, not a fault: its cause
    /// and Python frames are kept for the trace's environment (and for the fault it becomes if
    /// the program exits with a failure status); nothing is printed or written for it.
    pub fn note_failed_probe(&self, status: i32, status_name: &str) {
        if let Some(mut fault) = self.init_failure(status, status_name, Some((status, None))) {
            self.add_python_stack(&mut fault);
            fault.backtrace = self.caller.backtrace();
            self.session.keep_probe(fault);
        }
    }

    /// What the session knows that explains a failed start: a fork after the parent used CUDA,
    /// a sticky error already pending, and (when a handle is being created) the memory.
    pub fn init_context(&self, alloc_failed: bool) -> init::InitContext {
        let s = self.session;
        let creating_handle = matches!(self.hook, Hook::cublasCreate_v2 | Hook::cublasLtCreate | Hook::cudnnCreate);
        let memory = creating_handle.then(|| {
            let totals = s.allocations.totals();
            let device = self.device.memory_info();
            crate::trace::CauseMemory {
                free: device.map(|d| d.0),
                total: device.map(|d| d.1),
                live_count: totals.count,
                live_bytes: totals.bytes,
                largest: s.allocations.largest(),
            }
        });
        init::InitContext {
            forked_from: s.forked_from().filter(|o| o.parent_first_call.is_some()).map(|o| (o.parent_pid, o.parent_first_call)),
            pending_sticky: s.known_error().map(|k| (k.code, k.seq)),
            creating_handle,
            alloc_failed,
            memory,
        }
    }
}

#[cfg(test)]
pub(crate) mod model {
    //! A model of the outside world for the policy's unit tests.

    use super::*;
    use crate::config::Config;
    use crate::trace::Process;
    use std::cell::RefCell;

    /// Keeps what was published; `abort` only notes that it was asked for.
    #[derive(Default)]
    pub struct ModelOutlet {
        pub lines: RefCell<Vec<String>>,
        pub publications: Cell<u32>,
        pub rewrites: Cell<u32>,
        pub backtraces: Cell<u32>,
        pub aborted: Cell<bool>,
        /// What `gpu_health` answers.
        pub gpu_health: RefCell<Option<crate::gpu_health::GpuHealth>>,
        /// What `python_places` answers.
        pub python_places: Cell<crate::session::waits::PythonPlaces>,
    }

    /// The model thread: id 7, a one-frame stack, no Python.
    impl Caller for ModelOutlet {
        fn backtrace(&self) -> Vec<String> {
            self.backtraces.set(self.backtraces.get() + 1);
            vec!["model frame".into()]
        }
        /// The frame itself stands for the call's return address.
        fn call_site(&self, frame: HookFrame) -> CallSite {
            let mut site = CallSite::default();
            site.returns[0] = frame.frame;
            site
        }
        fn thread_id(&self) -> u32 {
            7
        }
        fn python_frames_at_call(&self) -> Option<super::KeptFrames> {
            None
        }
        fn python_places(&self) -> crate::session::waits::PythonPlaces {
            self.python_places.get()
        }
    }

    impl Outlet for ModelOutlet {
        fn publish(&self, _session: &Session, recorded: &Recorded) {
            self.lines.borrow_mut().extend(recorded.lines.iter().cloned());
            self.publications.set(self.publications.get() + 1);
            self.rewrites.set(self.rewrites.get() + recorded.rewrite as u32);
        }
        fn describe_call_site(&self, site: &CallSite) -> Vec<String> {
            site.addresses().map(|a| format!("model call site {a:#x}")).collect()
        }
        fn abort(&self) {
            self.aborted.set(true);
        }
        fn now_ns(&self) -> u64 {
            1
        }
        fn gpu_health(&self) -> Option<crate::gpu_health::GpuHealth> {
            self.gpu_health.borrow().clone()
        }
        /// Each place as a made-up frame that says what it was.
        fn describe_python_places(&self, places: &crate::session::waits::PythonPlaces) -> Vec<crate::trace::PythonFrame> {
            places
                .places()
                .map(|(code, offset)| crate::trace::PythonFrame { file: format!("model_{code:#x}.py"), line: offset as u32, function: "f".into() })
                .collect()
        }
        /// Plainly, without the real outlet's care for crashes and races: tests read it back.
        fn create_file(
            &self,
            dir: &str,
            name: &str,
            extension: &str,
            fill: &mut dyn FnMut(&mut std::io::BufWriter<&std::fs::File>) -> std::io::Result<()>,
        ) -> std::io::Result<String> {
            use std::io::Write as _;
            std::fs::create_dir_all(dir)?;
            let path = format!("{dir}/{name}.{extension}");
            let file = std::fs::File::create(&path)?;
            let mut out = std::io::BufWriter::new(&file);
            fill(&mut out)?;
            out.flush()?;
            Ok(path)
        }
    }

    pub use crate::check::model::ModelDevice;

    pub fn session(config: Config) -> Session {
        Session::new(config, crate::HOOK_NAMES, Process::default(), "model.json".into())
    }
}
