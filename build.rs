//! Links libsysprof-capture-4 for the `sysprof` feature (O1); nothing
//! otherwise.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "sysprof")]
    link_sysprof();
}

#[cfg(feature = "sysprof")]
fn link_sysprof() {
    // docs.rs documents every feature but has no libsysprof-capture; a
    // documentation build links nothing.
    if std::env::var_os("DOCS_RS").is_some() {
        return;
    }
    if let Err(err) = pkg_config::Config::new()
        .atleast_version("3.38")
        .probe("sysprof-capture-4")
    {
        panic!(
            "gdex's `sysprof` feature links libsysprof-capture-4 (>= 3.38), which pkg-config \
             did not find: {err}\nInstall it (Debian and Ubuntu: `apt-get install \
             libsysprof-4-dev`; Fedora: `dnf install sysprof-capture-devel`), or build without \
             the feature."
        );
    }
}
