//! The binding chain (critical path) back from a node: at each node the incoming edge that set its
//! time (the first to attain the max), down to an anchored node or a step limit. Linear in its
//! length; what callers use to pick candidate causes cheaply before replaying them.

use super::graph::{EdgeKind, Graph};
use super::replay::{Change, Patched, Workspace};
use super::{input_error, WhatIfError};

/// One node of a binding chain and how it got its time: `time = time(next link) + lag + slack`,
/// where the next link is the node `via` leads from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    pub node: u32,
    pub time: i64,
    /// The node's own slack (the part of its time no edge explains).
    pub slack: i64,
    /// The edge that bound the node: [`EdgeKind::Anchor`] ends the chain (the node keeps its
    /// measured time); [`EdgeKind::Duration`] also stands for an op's or call's own duration.
    pub via: EdgeKind,
    pub lag: i64,
}

impl Graph {
    /// The binding chain back from `node` on the measured times, `node` first, at most
    /// `max_steps` links.
    pub fn binding_chain(&self, node: u32, max_steps: usize) -> Result<Vec<Link>, WhatIfError> {
        self.check_node(node)?;
        let view = Patched { patches: &[], zero_all: false };
        Ok(self.chain_with(self.measured_times(), &view, node, max_steps))
    }

    /// The binding chain back from `node` in the last replay run in `ws`, which must have been of
    /// `change` (its lags decide which edge binds).
    pub fn binding_chain_after(&self, ws: &mut Workspace, change: &Change, node: u32, max_steps: usize) -> Result<Vec<Link>, WhatIfError> {
        self.check_node(node)?;
        let mut patches = Vec::new();
        self.patches_of(change, &mut patches)?;
        let view = Patched { patches: &patches, zero_all: change.zero_all_slack };
        Ok(self.chain_with(ws.times(), &view, node, max_steps))
    }

    fn check_node(&self, node: u32) -> Result<(), WhatIfError> {
        if node as usize >= self.n_nodes() {
            return Err(input_error(format!("node {node} out of range (the graph has {} nodes)", self.n_nodes())));
        }
        Ok(())
    }

    pub(crate) fn chain_with(&self, time: &[i64], view: &Patched, node: u32, max_steps: usize) -> Vec<Link> {
        let mut out = Vec::new();
        let mut node = node;
        while out.len() < max_steps && node >= 2 {
            let p = (node / 2) as usize;
            if node & 1 == 1 {
                // A unit's second slot: its own duration after its first.
                out.push(Link { node, time: time[node as usize], slack: 0, via: EdgeKind::Duration, lag: view.dur(self, p) });
                node -= 1;
                continue;
            }
            let mut best: Option<(i64, usize)> = None;
            for e in self.edge_range(p) {
                let v = time[self.edges[e].src as usize] + view.lag(self, p, e);
                if best.is_none_or(|(b, _)| v > b) {
                    best = Some((v, e));
                }
            }
            let (reach, e) = best.expect("every unit has an edge");
            let via = self.edge_kind[e];
            out.push(Link { node, time: time[node as usize], slack: time[node as usize] - reach, via, lag: view.lag(self, p, e) });
            if via == EdgeKind::Anchor {
                break;
            }
            node = self.edges[e].src;
        }
        out
    }
}
