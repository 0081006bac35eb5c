//! Gives the shared library its SONAME, so programs linked against
//! `libwspool.so` record `libwspool.so.0` and keep working across ABI-compatible
//! upgrades. (`make c-lib` adds the `libwspool.so.0` link beside the library.)

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "android" || os.ends_with("bsd") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libwspool.so.0");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
