//! X9 proof in an app: the GTK 4 demo in a real window. Runs
//! `examples/gtk_demo.rs` under Xvfb in self-test mode: it clicks Start,
//! Cancel, Start and Panic through GTK's own API, checks the counter, the
//! bar, the spinner's frames and the panic dialog, and saves a screenshot
//! under `target/`.

use crate::common;

use std::path::PathBuf;

use common::{watchdog, Xvfb};

#[test]
fn the_demo_app_works_in_a_real_window() {
    watchdog("the_demo_app_works_in_a_real_window", 300, || {
        let deps = std::env::current_exe().unwrap();
        let target = deps.parent().unwrap().parent().unwrap();
        let demo = target.join("examples/gtk_demo");
        assert!(
            demo.exists(),
            "{} is missing: run `cargo test --features gtk`",
            demo.display()
        );
        let screenshot: PathBuf = target.join("gtk_demo.png");
        let _ = std::fs::remove_file(&screenshot);

        let xvfb = Xvfb::start();
        let out = xvfb
            .gtk_command(&demo)
            .env("GDEX_DEMO_SELFTEST", &screenshot)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("SELFTEST OK"),
            "the demo failed ({:?}):\n{stdout}\n{stderr}",
            out.status
        );
        assert!(stdout.contains("dialogs=1"), "{stdout}");
        let png = std::fs::read(&screenshot).expect("the screenshot");
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 1000,
            "not a PNG"
        );
        println!("{stdout}screenshot: {}", screenshot.display());
    });
}
