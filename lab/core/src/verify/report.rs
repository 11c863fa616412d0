//! Verification reports: a table (spoke × check) for people, JUnit for CI (one test case per spoke,
//! namespace and check). Built from [`super::CheckResult`]s, which never hold secrets.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::CheckResult;
use crate::topology::Check;

/// The last verification of a lab, as the state folder keeps it for `status` and `diagnose` (the command
/// that verified gets its results from the run itself).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LastVerification {
    /// The run that verified.
    pub run: String,
    /// When (RFC 3339, seconds).
    pub at: String,
    pub simulated: bool,
    /// Every check passed.
    pub ok: bool,
    pub results: Vec<CheckResult>,
}

/// The table: one row per spoke and namespace, one column per check that ran.
pub fn table(results: &[CheckResult]) -> String {
    table_within(results, usize::MAX)
}

/// [`table`] with no table line wider than `width` terminal columns: each check column is as wide as its
/// name or its widest cell, and the row label (spoke and namespace) gives way, cut with `…`, when the
/// row would not fit. The failures listed under the table are prose, left whole for the terminal to wrap.
pub fn table_within(results: &[CheckResult], width: usize) -> String {
    let checks: Vec<Check> = Check::ALL
        .into_iter()
        .filter(|c| results.iter().any(|r| r.check == *c))
        .collect();
    let mut rows: BTreeMap<(String, String), BTreeMap<Check, Vec<&CheckResult>>> = BTreeMap::new();
    for r in results {
        rows.entry((r.spoke.clone(), r.namespace.clone()))
            .or_default()
            .entry(r.check)
            .or_default()
            .push(r);
    }
    let cell = |rs: Option<&Vec<&CheckResult>>| -> String {
        match rs {
            None => "-".into(),
            Some(rs) if rs.iter().all(|r| r.ok) => {
                match rs.iter().filter_map(|r| r.latency_ms).max() {
                    Some(ms) => format!("✓ {ms}ms"),
                    None => "✓".into(),
                }
            }
            Some(_) => "✗".into(),
        }
    };
    let label = |spoke: &str, ns: &str| format!("{spoke} ({ns})");
    let header = "spoke (namespace)";
    let columns: Vec<usize> = checks
        .iter()
        .map(|c| {
            rows.values()
                .map(|by| cell(by.get(c)).chars().count())
                .chain([c.as_str().len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let checks_width: usize = columns.iter().map(|w| w + 2).sum();
    // As wide as the longest row label (so that long namespaces keep the columns aligned), unless that
    // would pass `width`: then the labels are cut, never the check columns.
    let longest = rows
        .keys()
        .map(|(s, n)| label(s, n).chars().count())
        .chain([header.len()])
        .max()
        .unwrap_or(header.len());
    let w = longest.min(width.saturating_sub(checks_width).max(8));
    // Cut in the middle: a row's spoke starts its label and its namespace ends it, and both tell the
    // rows apart.
    let fit = |text: &str| -> String {
        let chars: Vec<char> = text.chars().collect();
        if chars.len() <= w {
            return text.to_owned();
        }
        let head = (w - 1) / 2;
        let tail = w - 1 - head;
        let mut cut: String = chars[..head].iter().collect();
        cut.push('…');
        cut.extend(&chars[chars.len() - tail..]);
        cut
    };
    let mut out = String::new();
    let mut line = format!("{:<w$}", fit(header));
    for (c, cw) in checks.iter().zip(&columns) {
        let _ = write!(line, "  {:<cw$}", c.as_str());
    }
    out.push_str(line.trim_end());
    out.push('\n');
    for ((spoke, ns), by_check) in &rows {
        let mut line = format!("{:<w$}", fit(&label(spoke, ns)));
        for (c, cw) in checks.iter().zip(&columns) {
            let _ = write!(line, "  {:<cw$}", cell(by_check.get(c)));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    failures(&mut out, results);
    out
}

/// The failed checks under the table, one per line, each with what to do next.
fn failures(out: &mut String, results: &[CheckResult]) {
    let failed: Vec<&CheckResult> = results.iter().filter(|r| !r.ok).collect();
    if !failed.is_empty() {
        out.push('\n');
        // Failures that share what to do next (one cause, several checks) say it once, after the last.
        for (i, r) in failed.iter().enumerate() {
            let hop = r
                .hop
                .map(|h| format!(" [{}]", h.name()))
                .unwrap_or_default();
            let permanent = if r.permanent {
                " (permanent: not waited for)"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "✗ {} for {} in {}{hop}: {}{permanent}",
                r.check, r.spoke, r.namespace, r.detail
            );
            let same_next = failed.get(i + 1).is_some_and(|n| n.next == r.next);
            if let Some(next) = r.next.as_ref().filter(|_| !same_next) {
                let _ = writeln!(out, "  next: {next}");
            }
        }
    }
}

/// JUnit XML: one suite per namespace, one test case per spoke and check.
pub fn junit(lab: &str, results: &[CheckResult]) -> String {
    let mut report = Report::new(format!("ocm-lab verify {lab}"));
    let mut suites: BTreeMap<&str, Vec<&CheckResult>> = BTreeMap::new();
    for r in results {
        suites.entry(r.namespace.as_str()).or_default().push(r);
    }
    for (ns, rs) in suites {
        let mut suite = TestSuite::new(format!("{lab}/{ns}"));
        for r in rs {
            let status = if r.ok {
                TestCaseStatus::success()
            } else {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(r.detail.clone());
                if let Some(hop) = r.hop {
                    s.set_type(format!("{hop:?}"));
                }
                if let Some(next) = &r.next {
                    s.set_description(format!("{}\nnext: {next}", r.detail));
                }
                s
            };
            let mut case = TestCase::new(format!("{}/{}", r.spoke, r.check), status);
            case.set_classname(format!("{lab}.{ns}"));
            if let Some(ms) = r.latency_ms {
                case.set_time(Duration::from_millis(ms));
            }
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
    }
    report.to_string().expect("JUnit serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Hop;

    fn result(spoke: &str, check: Check, ok: bool) -> CheckResult {
        CheckResult {
            check,
            spoke: spoke.into(),
            namespace: "cluster-inventory".into(),
            ok,
            detail: if ok {
                "fine".into()
            } else {
                "no Bound ManagedClusterSetBinding & <such>".into()
            },
            hop: (!ok).then_some(Hop::NoBoundBinding),
            next: (!ok).then(|| "bind it".into()),
            latency_ms: ok.then_some(46),
            permanent: false,
        }
    }

    #[test]
    fn the_table_has_a_row_per_spoke_and_lists_failures_with_what_to_do() {
        let t = table(&[
            result("cluster1", Check::Properties, true),
            result("cluster2", Check::Properties, false),
        ]);
        assert!(
            t.contains("cluster1 (cluster-inventory)") && t.contains("✓ 46ms"),
            "{t}"
        );
        assert!(
            t.contains("✗ properties for cluster2") && t.contains("next: bind it"),
            "{t}"
        );
    }

    /// The table of the workshop's widest row (every check, a long namespace) within 80 and 50 columns:
    /// no table line passes the width, the check columns stay whole, and the row label is what gives way.
    #[test]
    fn no_table_line_is_wider_than_the_terminal_and_the_label_gives_way() {
        let mut results = Vec::new();
        // The checks of a default lab (`consumer` runs only where the topology names a consumer image: seven
        // columns of at least nine characters need more than 80).
        for check in Check::ALL.into_iter().filter(|c| *c != Check::Consumer) {
            let mut r = result("cluster-eu-west-1", check, true);
            r.namespace = "open-cluster-management-addon".into();
            r.latency_ms = Some(12_345);
            results.push(r);
        }
        let table_lines = |t: &str| -> Vec<String> {
            t.lines()
                .take_while(|l| !l.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let whole = table(&results);
        assert!(
            whole.contains("cluster-eu-west-1 (open-cluster-management-addon)"),
            "{whole}"
        );
        let t = table_within(&results, 80);
        for line in table_lines(&t) {
            assert!(line.chars().count() <= 80, "{line}\n{t}");
        }
        // Cut in the middle: the spoke's start and the namespace's end still tell the rows apart.
        assert!(t.contains("cluste…-addon)"), "{t}");
        // Narrower than the check columns themselves: they stay whole, the label keeps a few characters.
        let t = table_within(&results, 50);
        assert!(
            t.contains("access-providers") && t.contains("✓ 12345ms"),
            "{t}"
        );
        assert!(t.lines().nth(1).unwrap().starts_with("clu…don)"), "{t}");
    }

    #[test]
    fn failures_with_one_cause_say_what_to_do_once_and_name_the_hop() {
        let mut a = result("cluster1", Check::Properties, false);
        a.permanent = true;
        let b = result("cluster2", Check::Properties, false);
        let mut c = result("cluster2", Check::Conditions, false);
        c.next = Some("look elsewhere".into());
        let t = table(&[a, b, c]);
        assert_eq!(t.matches("next: bind it").count(), 1, "{t}");
        assert_eq!(t.matches("next: look elsewhere").count(), 1, "{t}");
        assert!(
            t.contains(
                "✗ properties for cluster1 in cluster-inventory [no-bound-binding]: no Bound ManagedClusterSetBinding & <such> (permanent: not waited for)"
            ),
            "{t}"
        );
    }

    #[test]
    fn junit_has_one_case_per_spoke_and_check_and_escapes_text() {
        let x = junit(
            "sandbox",
            &[
                result("cluster1", Check::Properties, true),
                result("cluster2", Check::Conditions, false),
            ],
        );
        assert!(
            x.contains("tests=\"2\"") && x.contains("failures=\"1\""),
            "{x}"
        );
        assert!(x.contains("name=\"cluster2/conditions\""), "{x}");
        assert!(x.contains("&amp; &lt;such&gt;"), "{x}");
    }
}
