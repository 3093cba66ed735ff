//! Parts of the injection library a measurement can leave off, one at a time, to find what recording costs a
//! workload while it records nothing (outside every window).
//!
//! `SHARDSCOPE_INJECT_OMIT` is a comma-separated list of parts (the launcher passes its environment on). With
//! recording off, what the library leaves on is: CUPTI's subscription, the activity buffers and the device kind,
//! the graph node callbacks (node level), and the trigger callbacks (`cudaProfilerStart`/`Stop` in the runtime
//! domain, `cuProfilerStart`/`Stop` in the driver domain, the NVTX calls). Leaving one off and timing the same
//! program says what that part costs per launch (`benchmarks/scripts/capture_window.py`, the `capture-off-*`
//! modes). A window opened while a part is off records what that part leaves it: this is for measuring, not
//! for recording.

/// The environment variable that names the parts to leave off.
pub const OMIT_ENV: &str = "SHARDSCOPE_INJECT_OMIT";

/// Which parts to leave off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Omit {
    /// `subscribe`: load CUPTI and stop there (no subscription, nothing switched on, no spool).
    pub subscribe: bool,
    /// `activity`: no activity buffers and no activity kind at all, not even the device kind.
    pub activity: bool,
    /// `device-kind`: the device records' kind, the one kind on from the start.
    pub device_kind: bool,
    /// `graph-nodes`: the node-made and node-cloned callbacks.
    pub graph_nodes: bool,
    /// `runtime-triggers`: the `cudaProfilerStart`/`Stop` callbacks.
    pub runtime_triggers: bool,
    /// `driver-triggers`: the `cuProfilerStart`/`Stop` callbacks.
    pub driver_triggers: bool,
}

impl Omit {
    /// Parses the list; an unknown word is an error naming it.
    pub fn parse(text: &str) -> Result<Omit, String> {
        let mut omit = Omit::default();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let part = match word {
                "subscribe" => &mut omit.subscribe,
                "activity" => &mut omit.activity,
                "device-kind" => &mut omit.device_kind,
                "graph-nodes" => &mut omit.graph_nodes,
                "runtime-triggers" => &mut omit.runtime_triggers,
                "driver-triggers" => &mut omit.driver_triggers,
                other => {
                    return Err(format!(
                        "{OMIT_ENV}: unknown part '{other}' (known: subscribe, activity, device-kind, graph-nodes, \
                         runtime-triggers, driver-triggers)"
                    ));
                }
            };
            *part = true;
        }
        Ok(omit)
    }

    /// The parts named in [`OMIT_ENV`], none when it is unset.
    pub fn from_env() -> Result<Omit, String> {
        std::env::var(OMIT_ENV).map_or(Ok(Omit::default()), |text| Omit::parse(&text))
    }

    /// Some part is left off.
    pub fn any(&self) -> bool {
        *self != Omit::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_named_one_by_one_and_an_unknown_one_is_refused() {
        assert_eq!(Omit::parse("").unwrap(), Omit::default());
        let omit = Omit::parse("runtime-triggers, device-kind").unwrap();
        assert!(omit.runtime_triggers && omit.device_kind && omit.any());
        assert!(!omit.driver_triggers && !omit.subscribe && !omit.activity && !omit.graph_nodes);
        let error = Omit::parse("device").unwrap_err();
        assert!(error.contains("'device'") && error.contains(OMIT_ENV), "{error}");
    }
}
