//! The picture as text, for `status --watch`: the dashboard's sections, each state as a mark and a word.

use std::fmt::Write as _;

use super::{Health, Picture, SpokeCard};

/// The mark of a state: a different shape for each, so it reads without colour.
fn mark(h: Health) -> &'static str {
    match h {
        Health::Ok => "✓",
        Health::Degraded => "▲",
        Health::Down => "✕",
        Health::Unknown => "?",
    }
}

/// The whole picture, one section after the other.
pub fn render(p: &Picture) -> String {
    let mut out = String::new();
    let sim = if p.simulated {
        " (SIMULATED lab: a test double, not real clusters)"
    } else {
        ""
    };
    let _ = writeln!(out, "Lab `{}`{sim}", p.lab);
    if let Some(e) = &p.exercise {
        let _ = writeln!(out, "Exercise running: {} ({})", e.title, e.name);
    }
    for problem in &p.problems {
        let _ = writeln!(out, "▲ {problem}");
    }
    let _ = writeln!(out, "\nClusters");
    let h = &p.hub;
    let _ = writeln!(
        out,
        "  {} {:<7} hub    {:<14} {}",
        mark(h.health),
        h.health.word(),
        h.name,
        h.detail
    );
    for s in &p.spokes {
        spoke(&mut out, s);
    }
    for d in &p.departed {
        let _ = writeln!(
            out,
            "  ? leaving spoke  {d:<14} left the topology: the next `up` deletes it"
        );
    }
    sets(&mut out, p);
    profiles(&mut out, p);
    verification(&mut out, p);
    out
}

fn spoke(out: &mut String, s: &SpokeCard) {
    let c = &s.cluster;
    let _ = writeln!(
        out,
        "  {} {:<7} spoke  {:<14} {}",
        mark(c.health),
        c.health.word(),
        c.name,
        c.detail
    );
    let addons: Vec<String> = s
        .addons
        .iter()
        .map(|a| format!("{} {}", mark(a.health), a.name))
        .collect();
    let _ = writeln!(
        out,
        "      ManagedCluster {} {}{}{}",
        mark(s.managed),
        s.managed_detail,
        if addons.is_empty() { "" } else { "; addons " },
        addons.join(", ")
    );
    if !s.properties.is_empty() {
        let props: Vec<String> = s
            .properties
            .iter()
            .map(|p| {
                let arrived = if p.in_claims {
                    "✓"
                } else {
                    "✕ not in claims"
                };
                format!("{}={} {arrived}", p.name, p.value)
            })
            .collect();
        let _ = writeln!(out, "      properties on the spoke: {}", props.join(", "));
    }
}

fn sets(out: &mut String, p: &Picture) {
    if p.sets.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nManagedClusterSets");
    for s in &p.sets {
        let bindings: Vec<String> = s
            .bindings
            .iter()
            .map(|b| {
                let bound = if b.health == Health::Ok {
                    "bound"
                } else {
                    "NOT bound"
                };
                format!("{} {} ({bound})", mark(b.health), b.namespace)
            })
            .collect();
        let members = if s.members.is_empty() {
            "no clusters".to_owned()
        } else {
            s.members.join(", ")
        };
        let bound = if bindings.is_empty() {
            "bound nowhere".to_owned()
        } else {
            format!("bound to {}", bindings.join(", "))
        };
        let _ = writeln!(out, "  {} [{}]: {members}; {bound}", s.name, s.selector);
    }
}

fn profiles(out: &mut String, p: &Picture) {
    if p.namespaces.is_empty() {
        return;
    }
    let _ = writeln!(out, "\nClusterProfiles");
    for ns in &p.namespaces {
        let bound = if ns.bound { "" } else { " (no Bound binding)" };
        let _ = writeln!(out, "  {}{bound}", ns.name);
        if ns.profiles.is_empty() {
            let _ = writeln!(out, "    none");
        }
        for c in &ns.profiles {
            let props: Vec<String> = c
                .properties
                .iter()
                .map(|p| format!("{}={}", p.name, p.value))
                .collect();
            let access = if c.access_providers.is_empty() {
                "no access provider".to_owned()
            } else {
                format!("access: {}", c.access_providers.join(", "))
            };
            let _ = writeln!(
                out,
                "    {} {:<14} {}; {access}",
                mark(c.health),
                c.name,
                if props.is_empty() {
                    "no properties".to_owned()
                } else {
                    props.join(", ")
                }
            );
        }
    }
}

fn verification(out: &mut String, p: &Picture) {
    let Some(v) = &p.verification else {
        let _ = writeln!(out, "\nLast verification: none recorded");
        return;
    };
    let result = if v.ok { "✓ passed" } else { "✕ FAILED" };
    let _ = writeln!(out, "\nLast verification: {result} at {}", v.at);
    for row in &v.rows {
        let cells: Vec<String> = v
            .checks
            .iter()
            .zip(&row.cells)
            .filter_map(|(check, cell)| {
                let cell = cell.as_ref()?;
                Some(match (&cell.hop, cell.ok) {
                    (_, true) => format!("✓ {check}"),
                    (Some(hop), false) => format!("✕ {check} (broken at {hop})"),
                    (None, false) => format!("✕ {check}"),
                })
            })
            .collect();
        let _ = writeln!(
            out,
            "  {} ({}): {}",
            row.spoke,
            row.namespace,
            cells.join("  ")
        );
    }
}

/// `status --watch`: the lab that `status` would look at, as a picture redrawn on every change.
pub fn watch(
    args: &crate::cli::StatusArgs,
    host: &crate::topology::Host,
) -> Result<(), crate::error::Error> {
    let args = crate::cli::RunArgs::from(args);
    let (lab, state, patches) = crate::commands::runner::look_at(&args, host)?;
    draw(super::Looker::new(args, lab, state, patches)?)
}

/// `status --watch`: the lab picture, drawn again each time it changes, until Ctrl-C (exit 0). On a
/// terminal each picture replaces the last; into a pipe or file they follow each other.
fn draw(mut looker: super::Looker) -> Result<(), crate::error::Error> {
    let first = looker.look()?;
    let stop = tokio_util::sync::CancellationToken::new();
    let (mut pictures, lookout) = looker.keep_looking(first, stop.clone());
    let on_terminal = console::Term::stdout().is_term();
    let rt = crate::commands::runner::runtime()?;
    let drawn = rt.block_on(async {
        // One Ctrl-C listener for the whole watch, polled once here so that it listens from now on: a
        // `ctrl_c()` made afresh for each wait would miss a Ctrl-C that comes while a picture is written.
        let mut ctrl_c = std::pin::pin!(tokio::signal::ctrl_c());
        if futures::poll!(ctrl_c.as_mut()).is_ready() {
            return Ok(());
        }
        loop {
            let frame = render(&pictures.borrow_and_update());
            let frame = if on_terminal {
                // Cursor home, clear the screen: the new picture replaces the old one.
                format!(
                    "\x1b[H\x1b[2J{frame}\n(watching: redrawn when the lab changes; Ctrl-C stops)\n"
                )
            } else {
                format!("{frame}\n")
            };
            crate::commands::stdout(&frame)?;
            tokio::select! {
                changed = pictures.changed() => if changed.is_err() { return Ok(()) },
                _ = ctrl_c.as_mut() => return Ok(()),
            }
        }
    });
    stop.cancel();
    let _ = lookout.join();
    drawn
}
