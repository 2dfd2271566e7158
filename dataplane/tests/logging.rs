//! `dpd`'s logger (installed here as `dpd` installs it: one per process,
//! so one test in this file) takes a new filter from the control thread
//! at once, whatever the engines do.

mod common;

use common::controller::{reply, running, started, CONFIG};
use control::api::{Body, Request};
use control::config::{Config, Log, LogFormat};
use log::Level;

#[test]
fn the_log_filter_changes_at_once_whatever_the_engines_do() {
    // SAFETY: the only test in this process, before any thread starts.
    unsafe { std::env::remove_var("RUST_LOG") };
    let cfg = Config::parse(&format!("{CONFIG}[log]\nlevel = \"warn\"\n")).unwrap();
    dataplane::logging::init(&Log {
        level: cfg.log.level.clone(),
        format: LogFormat::Json,
        ..Log::default()
    })
    .unwrap();
    let proxy = "dataplane::app::proxy";
    let on = |target: &str, level: Level| log::log_enabled!(target: target, level);
    assert_eq!(dataplane::logging::level().as_deref(), Some("warn"));
    assert!(on(proxy, Level::Warn) && !on(proxy, Level::Info));

    let (mut ctl, mut e0, mut e1) = started(cfg);
    let debug_proxy = Request::LogLevel {
        level: format!("warn,{proxy}=debug"),
    };
    // Engine 1 stalled (when more logging is wanted): the filter changes
    // all the same, no engine asked. Before, the change went to the
    // engines like any other and was refused.
    let r = running(&mut [&mut e0], || reply(ctl.handle(&debug_proxy)));
    assert!(r.ok, "{r:?}");
    let want = format!("warn,{proxy}=debug");
    assert_eq!(dataplane::logging::level(), Some(want.clone()));
    assert!(on(proxy, Level::Debug) && !on(proxy, Level::Trace));
    assert!(
        !on("dataplane::engine", Level::Info),
        "other targets stay at warn"
    );
    // The running configuration holds it: `config save` writes it.
    match reply(ctl.handle(&Request::ConfigShow)).body {
        Some(Body::Config(text)) => {
            assert_eq!(Config::parse(&text).unwrap().log.level, want, "{text}");
        }
        other => panic!("{other:?}"),
    }

    // A filter that does not read changes nothing.
    let r = reply(ctl.handle(&Request::LogLevel {
        level: "debgu".into(),
    }));
    assert!(
        !r.ok && r.error.as_deref().unwrap_or("").contains("log.level"),
        "{r:?}"
    );
    assert_eq!(dataplane::logging::level(), Some(want));

    let r = reply(ctl.handle(&Request::LogLevel {
        level: "off".into(),
    }));
    assert!(r.ok, "{r:?}");
    assert!(!on(proxy, Level::Error));

    // The level the configuration names already, while another filter is
    // in effect (`RUST_LOG`'s at start): taken. Before, a change to the
    // same level changed nothing and the other filter stayed.
    dataplane::logging::set_level("debug").unwrap();
    let r = running(&mut [&mut e0, &mut e1], || {
        reply(ctl.handle(&Request::LogLevel {
            level: "off".into(),
        }))
    });
    assert!(r.ok, "{r:?}");
    assert_eq!(dataplane::logging::level().as_deref(), Some("off"));
    assert!(!on(proxy, Level::Error));
}
