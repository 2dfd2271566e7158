//! Generates bindings to the DPDK found by pkg-config, builds the C shim for
//! DPDK's static-inline functions, and reads DPDK's bit-flag constants by
//! compiling and running a tiny C program against the same headers.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const MISSING: &str = "DPDK was not found by pkg-config (`libdpdk`). \
Install libdpdk-dev: run scripts/setup.sh (Debian: apt-get install libdpdk-dev pkg-config).";

fn main() {
    println!("cargo:rerun-if-changed=shim");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let dpdk = match pkg_config::Config::new()
        .atleast_version("21.11")
        .cargo_metadata(true)
        .probe("libdpdk")
    {
        Ok(lib) => lib,
        Err(err) => panic!("{MISSING}\n(pkg-config said: {err})"),
    };
    // The pkg-config cflags (include paths, `-include rte_config.h`,
    // `-march=...`) go to bindgen and to the C compiler alike.
    let cflags = pkg_config_cflags();
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));

    let mut shim = cc::Build::new();
    shim.file("shim/shim.c")
        .include("shim")
        .warnings(true)
        .opt_level(3);
    for flag in &cflags {
        shim.flag(flag);
    }
    shim.compile("tlsdp_dpdk_shim");
    // The shim asks the bonding driver for a bond's members; libdpdk's
    // pkg-config leaves drivers to be loaded as plugins, so link it.
    println!("cargo:rustc-link-lib=dylib=rte_net_bond");

    // DPDK's flags are function-like macros (RTE_BIT64(n)); let the C compiler
    // evaluate them and print Rust constants.
    let compiler = cc::Build::new().get_compiler();
    let consts_bin = out.join("dpdk_consts");
    let mut cmd = compiler.to_command();
    cmd.args(&cflags)
        .arg("shim/consts.c")
        .arg("-o")
        .arg(&consts_bin);
    let status = cmd
        .status()
        .expect("running the C compiler for shim/consts.c");
    assert!(
        status.success(),
        "compiling shim/consts.c against DPDK failed"
    );
    let consts = Command::new(&consts_bin)
        .output()
        .expect("running the DPDK constants program");
    assert!(consts.status.success(), "the DPDK constants program failed");
    std::fs::write(out.join("consts.rs"), consts.stdout).expect("writing consts.rs");

    let mut builder = bindgen::Builder::default()
        .header("shim/wrapper.h")
        .clang_arg("-Ishim")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .allowlist_function("rte_eal_.*")
        .allowlist_function("rte_eth_.*")
        .allowlist_function("rte_pktmbuf_pool_create")
        .allowlist_function("rte_mempool_free")
        .allowlist_function("rte_mempool_lookup")
        .allowlist_function("rte_socket_id")
        .allowlist_function("rte_lcore_.*")
        .allowlist_function("rte_get_next_lcore")
        .allowlist_function("rte_get_main_lcore")
        .allowlist_function("rte_get_tsc_hz")
        .allowlist_function("rte_strerror")
        .allowlist_function("rte_thread_register")
        .allowlist_function("rte_thread_unregister")
        .allowlist_function("rte_version")
        .allowlist_function("rte_dev_probe")
        .allowlist_function("rte_dev_remove")
        .allowlist_function("rte_softrss.*")
        .allowlist_function("rte_openlog_stream")
        .allowlist_function("rte_log_cur_msg_loglevel")
        .allowlist_function("rte_memseg_walk")
        .allowlist_function("rte_memseg_get_fd_thread_unsafe")
        .allowlist_function("tlsdp_.*")
        .allowlist_type("rte_mbuf")
        .allowlist_type("rte_mempool")
        .allowlist_type("rte_eth_.*")
        .allowlist_type("rte_ether_addr")
        .allowlist_var("RTE_ETHER_.*")
        .allowlist_var("RTE_ETH_NAME_MAX_LEN")
        .allowlist_var("RTE_MEMPOOL_CACHE_MAX_SIZE")
        .allowlist_var("SOCKET_ID_ANY")
        .allowlist_var("LCORE_ID_ANY")
        .allowlist_var("RTE_ETH_LINK_.*")
        .default_enum_style(bindgen::EnumVariation::ModuleConsts)
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false);
    for flag in &cflags {
        builder = builder.clang_arg(flag);
    }
    let bindings = builder
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on DPDK {}: {e}", dpdk.version));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings.rs");
    println!("cargo:rustc-env=TLSDP_DPDK_VERSION={}", dpdk.version);
}

/// The `--cflags` of libdpdk, split into arguments.
fn pkg_config_cflags() -> Vec<String> {
    let out = Command::new(env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into()))
        .args(["--cflags", "libdpdk"])
        .output()
        .expect(MISSING);
    assert!(out.status.success(), "{MISSING}");
    let text = String::from_utf8(out.stdout).expect("pkg-config output is UTF-8");
    let mut args = Vec::new();
    let mut words = text.split_whitespace();
    while let Some(word) = words.next() {
        // `-include rte_config.h` is two words that belong together.
        if word == "-include" {
            if let Some(file) = words.next() {
                args.push(word.to_string());
                args.push(file.to_string());
            }
        } else {
            args.push(word.to_string());
        }
    }
    args
}
