//! Scenarios reproducing the reference reports' tables.

/// The reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Name {
    F5,
    Lbo,
    Abs,
    Sp,
}

use crate::run::{TestKind, TestSpec};
use crate::target::{KeyType, Target};

/// Error running a scenario.
#[derive(Debug)]
pub struct ScenarioError(pub String);

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "scenario: {}", self.0)
    }
}
impl std::error::Error for ScenarioError {}

/// Runs a scenario; `spec` builds a test spec from the command line's options.
///
/// # Errors
/// When a spec cannot be built.
pub fn run(
    _name: Name,
    _targets: &[Target],
    _spec: &dyn Fn(TestKind, Option<KeyType>) -> anyhow::Result<TestSpec>,
) -> Result<String, ScenarioError> {
    Err(ScenarioError("not yet".into()))
}
