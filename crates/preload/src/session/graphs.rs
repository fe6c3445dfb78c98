//! CUDA graphs: what a call captured into a graph reads and writes, kept with the graph so it
//! can be scanned where the call's kernel runs, after each launch of the graph. Kept per
//! capturing stream while the capture runs, moved to the graph at `cudaStreamEndCapture`, and
//! to each executable instantiated from it at `cudaGraphInstantiate`.

use std::sync::Arc;

use crate::check::operand_call::{Members, Role};
use crate::scan::DType;
use crate::session::call_site::CallSite;
use crate::validate::StoredShape;

/// Graphs whose kept operands are remembered, at most: past it, the oldest is forgotten.
const MAX_KEPT: usize = 256;

/// One operand of a captured call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeptOperand {
    /// The captured call: its number and its hooked function (by index).
    pub seq: u64,
    pub hook: u16,
    pub name: &'static str,
    pub addr: u64,
    pub shape: StoredShape,
    pub dtype: DType,
    pub role: Role,
    /// One matrix, or a strided batch of them (a pointer-array batch is not kept: its
    /// pointers live in device memory the replay may have rewritten).
    pub members: Members,
    /// Where the captured call was made.
    pub site: CallSite,
}

#[derive(Default)]
struct Kept {
    capturing: Vec<(u64, Vec<KeptOperand>)>,
    graphs: Vec<(u64, Arc<[KeptOperand]>)>,
    execs: Vec<(u64, Arc<[KeptOperand]>)>,
}

/// The kept operands of every capture, graph and executable graph.
#[derive(Default)]
pub struct Graphs {
    kept: parking_lot::Mutex<Kept>,
}

fn put(list: &mut Vec<(u64, Arc<[KeptOperand]>)>, key: u64, ops: Arc<[KeptOperand]>) {
    list.retain(|(k, _)| *k != key);
    if list.len() >= MAX_KEPT {
        list.remove(0);
    }
    list.push((key, ops));
}

impl Graphs {
    /// A call captured on `stream`: its operands, kept until the capture ends.
    pub fn keep(&self, stream: u64, operands: impl IntoIterator<Item = KeptOperand>) {
        let mut kept = self.kept.lock();
        match kept.capturing.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, list)) => list.extend(operands),
            None => {
                let list: Vec<KeptOperand> = operands.into_iter().collect();
                if kept.capturing.len() >= MAX_KEPT {
                    kept.capturing.remove(0);
                }
                kept.capturing.push((stream, list));
            }
        }
    }

    /// The capture on `stream` ended: as `graph` (0: it failed, and what it kept is dropped).
    pub fn end_capture(&self, stream: u64, graph: u64) {
        let mut kept = self.kept.lock();
        let Some(at) = kept.capturing.iter().position(|(s, _)| *s == stream) else { return };
        let (_, ops) = kept.capturing.swap_remove(at);
        if graph != 0 && !ops.is_empty() {
            put(&mut kept.graphs, graph, ops.into());
        }
    }

    /// `exec` was instantiated from `graph` (0: the instantiation failed).
    pub fn instantiate(&self, graph: u64, exec: u64) {
        let mut kept = self.kept.lock();
        // An address reused by a new executable holds nothing of the old one's.
        kept.execs.retain(|(e, _)| *e != exec);
        let Some(ops) = kept.graphs.iter().find(|(g, _)| *g == graph).map(|(_, ops)| ops.clone()) else { return };
        if exec != 0 {
            put(&mut kept.execs, exec, ops);
        }
    }

    /// `exec` runs what the guard no longer knows (a node's arguments changed), or is gone.
    pub fn forget(&self, exec: u64) {
        self.kept.lock().execs.retain(|(e, _)| *e != exec);
    }

    /// What a launch of `exec` runs that the guard scans after it.
    pub fn for_launch(&self, exec: u64) -> Option<Arc<[KeptOperand]>> {
        self.kept.lock().execs.iter().find(|(e, _)| *e == exec).map(|(_, ops)| ops.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(seq: u64) -> KeptOperand {
        KeptOperand {
            seq,
            hook: 1,
            name: "A",
            addr: 0x1000 * seq,
            shape: StoredShape { rows: 2, cols: 2, ld: 2 },
            dtype: DType::F32,
            role: Role::Input,
            members: Members::One,
            site: CallSite::default(),
        }
    }

    #[test]
    fn operands_follow_a_capture_to_its_graph_and_its_executables_and_a_failed_capture_keeps_nothing() {
        let g = Graphs::default();
        g.keep(7, [op(1)]);
        g.keep(7, [op(2)]);
        g.keep(8, [op(3)]);
        g.end_capture(7, 0x70);
        g.end_capture(8, 0); // invalidated
        g.instantiate(0x70, 0x700);
        g.instantiate(0x80, 0x800);
        assert_eq!(g.for_launch(0x700).map(|ops| ops.iter().map(|o| o.seq).collect::<Vec<_>>()), Some(vec![1, 2]));
        assert_eq!(g.for_launch(0x800), None);
        // A new executable at a reused address holds nothing of the old one's.
        g.instantiate(0x99, 0x700);
        assert_eq!(g.for_launch(0x700), None);
        // Nor one whose nodes were changed.
        g.instantiate(0x70, 0x701);
        g.forget(0x701);
        assert_eq!(g.for_launch(0x701), None);
    }
}
