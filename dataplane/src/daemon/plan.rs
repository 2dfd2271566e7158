//! The start-up plan: what this machine has (CPUs, hugepages, network
//! interfaces) checked against the configuration, and the EAL arguments
//! that follow from both. Pure: nothing starts here.

use control::config::{Config, ConfigError, DeviceKind, HugepagePolicy};

/// Parses a sysfs CPU list (`0-3,8,10-11`).
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// What the machine offers, as `dpd` needs it.
#[derive(Debug, Clone)]
pub struct Machine {
    /// CPUs online that dpd may run on (its affinity: `taskset`, a
    /// cpuset, systemd's `CPUAffinity=`).
    pub online_cpus: Vec<u32>,
    pub free_hugepage_bytes: u64,
    pub hugepages: Vec<String>,
}

impl Machine {
    pub fn probe() -> Self {
        let mut online_cpus = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|t| parse_cpu_list(&t))
            .unwrap_or_else(|| {
                (0..std::thread::available_parallelism().map_or(1, |n| n.get() as u32)).collect()
            });
        // A CPU outside the affinity is one EAL cannot pin a thread to
        // ("Cannot set affinity"): left out, so the plan names it.
        if let Some(allowed) = crate::dpdk::allowed_cpus() {
            online_cpus.retain(|c| allowed.contains(c));
        }
        let (free_hugepage_bytes, hugepages) = match hugepages::discover() {
            Ok(inv) => {
                let mut lines: Vec<String> = inv.sizes.iter().map(|p| p.to_string()).collect();
                lines.extend(inv.nodes.iter().map(|p| p.to_string()));
                (inv.free_bytes(), lines)
            }
            Err(e) => (0, vec![format!("unreadable: {e}")]),
        };
        Self {
            online_cpus,
            free_hugepage_bytes,
            hugepages,
        }
    }
}

/// About what dpd makes in hugepages, generously: `eal.mbufs` of each
/// size the ports need (2 KiB of data room, and one size per jumbo MTU),
/// with their headers, and 64 MiB for the large mbufs of segmenting ports
/// (32 MiB) and EAL's own.
pub fn hugepage_need(cfg: &Config) -> u64 {
    const MBUF_HEADER: u64 = 128 + 64;
    let mut rooms = vec![u64::from(dpdk_sys::consts::RTE_MBUF_DEFAULT_BUF_SIZE)];
    for p in &cfg.ports {
        let frame = u64::from(p.mtu) + 26 + u64::from(dpdk_sys::consts::RTE_PKTMBUF_HEADROOM);
        let room = (frame + 256).next_multiple_of(1024);
        if frame > u64::from(dpdk_sys::consts::RTE_MBUF_DEFAULT_BUF_SIZE) && !rooms.contains(&room)
        {
            rooms.push(room);
        }
    }
    let per_mbuf: u64 = rooms.iter().map(|r| r + MBUF_HEADER).sum();
    u64::from(cfg.eal.mbufs) * per_mbuf + (64 << 20)
}

/// The start-up plan: EAL arguments and the main lcore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub main_lcore: u32,
    /// The control thread shares a CPU with an engine (`eal.cpus` left
    /// none free).
    pub control_shares_cpu: bool,
    pub use_hugepages: bool,
    pub eal_args: Vec<String>,
}

/// Checks `cfg` against `machine` and builds the EAL arguments.
///
/// # Errors
/// A core that does not exist, no core left for the control thread, an
/// interface that does not exist, or no hugepages when they are required.
pub fn plan(
    cfg: &Config,
    machine: &Machine,
    iface_exists: impl Fn(&str) -> bool,
) -> Result<Plan, ConfigError> {
    let mapped = !cfg.eal.cpus.is_empty();
    let (field, cpus) = if mapped {
        ("eal.cpus", &cfg.eal.cpus)
    } else {
        ("eal.lcores", &cfg.eal.lcores)
    };
    for (i, core) in cpus.iter().enumerate() {
        if !machine.online_cpus.contains(core) {
            return Err(ConfigError::new(
                format!("{field}[{i}]"),
                core,
                format!(
                    "no such core, or not one dpd may run on (online and allowed: {:?})",
                    machine.online_cpus
                ),
            ));
        }
    }
    let free_cpu = machine
        .online_cpus
        .iter()
        .copied()
        .find(|c| !cpus.contains(c));
    let (main_lcore, main_cpu) = if mapped {
        let id = (0..128)
            .find(|id| !cfg.eal.lcores.contains(id))
            .ok_or_else(|| {
                ConfigError::new(
                    "eal.lcores",
                    cfg.eal.lcores.len(),
                    "with eal.cpus, at most 127 dataplane cores: one lcore id below 128 is the control thread's",
                )
            })?;
        (id, free_cpu.unwrap_or(cpus[0]))
    } else {
        let c = free_cpu.ok_or_else(|| {
            ConfigError::new(
                "eal.lcores",
                format!("{:?}", cfg.eal.lcores),
                "leave one core for the control thread",
            )
        })?;
        (c, c)
    };
    for (i, port) in cfg.ports.iter().enumerate() {
        // The port's own device, then a bond's members (DPDK's bonding
        // driver alone reports a missing one as a bare EPERM).
        let devices = std::iter::once((format!("port[{i}].device"), port.clone())).chain(
            port.members()
                .enumerate()
                .map(|(j, m)| (format!("port[{i}].bond_members[{j}]"), m)),
        );
        for (field, p) in devices {
            if let Some(iface) = p.kernel_iface() {
                if !iface_exists(iface) {
                    return Err(ConfigError::new(
                        field,
                        &p.device,
                        format!(
                            "network interface {iface:?} does not exist (in this network namespace)"
                        ),
                    ));
                }
            }
        }
    }
    let sized_by_user = cfg
        .eal
        .args
        .iter()
        .any(|a| a.starts_with("-m") || a.starts_with("--socket-mem"));
    let use_hugepages = match cfg.eal.hugepages {
        HugepagePolicy::Off => false,
        // Enough for what dpd will make there, or normal pages: a few
        // free pages alone would fail the mempools (ENOMEM) rather than
        // fall back.
        HugepagePolicy::Preferred => machine.free_hugepage_bytes >= hugepage_need(cfg),
        // With its own `-m`/`--socket-mem`, the operator sized DPDK's
        // memory: some free is all that is asked.
        HugepagePolicy::Required if machine.free_hugepage_bytes == 0 || (machine.free_hugepage_bytes < hugepage_need(cfg) && !sized_by_user) => {
            return Err(ConfigError::new(
                "eal.hugepages",
                "required",
                format!(
                    "{} MiB of hugepages free, and dpd needs about {} MiB (eal.mbufs = {} of each size the ports' MTUs need); reserve more (scripts/setup.sh, or /proc/sys/vm/nr_hugepages) or lower eal.mbufs",
                    machine.free_hugepage_bytes >> 20,
                    hugepage_need(cfg).div_ceil(1 << 20),
                    cfg.eal.mbufs
                ),
            ))
        }
        HugepagePolicy::Required => true,
    };

    let mut args = if mapped {
        let mut map = vec![format!("{main_lcore}@{main_cpu}")];
        map.extend(
            cfg.eal
                .lcores
                .iter()
                .zip(cpus)
                .map(|(l, c)| format!("{l}@{c}")),
        );
        vec![format!("--lcores={}", map.join(","))]
    } else {
        let mut cores = vec![main_lcore];
        cores.extend(&cfg.eal.lcores);
        vec![
            "-l".to_string(),
            cores
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ]
    };
    args.push(format!("--main-lcore={main_lcore}"));
    if !cfg.has_pci_port() {
        args.push("--no-pci".into());
    }
    for port in &cfg.ports {
        // A bond's members are probed first: the bond takes them over.
        for m in port.members() {
            match m
                .device_kind()
                .map_err(|r| ConfigError::new("port.bond_members", &m.device, r))?
            {
                DeviceKind::Pci(addr) => args.push(format!("--allow={addr}")),
                DeviceKind::Virtual { spec, .. } => args.push(format!("--vdev={spec}")),
                DeviceKind::VnetTap { .. } => {}
            }
        }
        if let Some(bond) = port.bond_devargs() {
            args.push(format!("--vdev={bond}"));
            continue;
        }
        match port
            .device_kind()
            .map_err(|r| ConfigError::new("port.device", &port.device, r))?
        {
            DeviceKind::Pci(addr) => args.push(format!("--allow={addr}")),
            DeviceKind::Virtual { spec, .. } => args.push(format!("--vdev={spec}")),
            DeviceKind::VnetTap { .. } => {} // dpd's own, not DPDK's
        }
    }
    // Memory: never leave shared files behind, so several dpd (and tests)
    // can run side by side. `--in-memory` needs hugepages; without them,
    // `--no-huge` (which implies legacy memory) pairs with `--no-shconf`.
    let user_args = cfg
        .eal
        .args
        .iter()
        .filter(|a| use_hugepages || a.as_str() != "--in-memory");
    let user_has = |p: &str| cfg.eal.args.iter().any(|a| a.starts_with(p));
    if use_hugepages {
        if !user_has("--file-prefix") && !user_has("--in-memory") {
            args.push("--in-memory".into());
        }
    } else {
        args.extend(["--no-huge".to_string(), "--no-shconf".to_string()]);
        // As much as the mempools need (512 MiB at least): a fixed
        // amount failed larger `eal.mbufs` or jumbo MTUs with ENOMEM.
        if !user_has("-m") && !user_has("--socket-mem") {
            let mib = hugepage_need(cfg).div_ceil(1 << 20).max(512);
            args.extend(["-m".to_string(), mib.to_string()]);
        }
    }
    // A zero-copy memif client shares dpd's mbuf memory with its server:
    // DPDK maps it from one file per segment list, in hugepages.
    if let Some((i, _)) = cfg
        .ports
        .iter()
        .enumerate()
        .find(|(_, p)| p.memif_client().is_some_and(|m| m.zero_copy))
    {
        if !use_hugepages {
            return Err(ConfigError::new(
                format!("port[{i}].device"),
                &cfg.ports[i].device,
                "a zero-copy memif client needs hugepages (reserve some: scripts/setup.sh; or zero-copy=no)",
            ));
        }
        if !user_has("--single-file-segments") {
            args.push("--single-file-segments".into());
        }
        // DPDK's telemetry thread waits in accept(), which holds the lowest
        // free descriptor number: the one a memif disconnection frees, and
        // which dpd must give back to EAL's memory (dpdk::MemsegFds).
        if !user_has("--no-telemetry") {
            args.push("--no-telemetry".into());
        }
    }
    args.extend(user_args.cloned());
    Ok(Plan {
        main_lcore,
        control_shares_cpu: mapped && free_cpu.is_none(),
        use_hugepages,
        eal_args: args,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(free: u64) -> Machine {
        Machine {
            online_cpus: vec![0, 1],
            free_hugepage_bytes: free,
            hugepages: vec![],
        }
    }

    fn config(extra: &str) -> Config {
        Config::parse(&format!(
            "[eal]\nlcores = [1]\n{extra}\n[[port]]\nname = \"p0\"\ndevice = \"net_af_packet0,iface=veth-dut\"\naddress = \"10.77.0.1/24\"\n"
        ))
        .unwrap()
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn a_bond_probes_its_members_then_itself_in_mode_4() {
        let c = Config::parse(
            "[eal]\nlcores = [1]\n[[port]]\nname = \"bond0\"\ndevice = \"net_bonding0\"\n\
             bond_members = [\"net_tap0,iface=a1\", \"net_tap1,iface=a2\"]\naddress = \"10.77.0.1/24\"\n",
        )
        .unwrap();
        let p = plan(&c, &machine(1 << 30), |_| true).unwrap();
        assert_eq!(
            p.eal_args[4..7],
            [
                "--vdev=net_tap0,iface=a1",
                "--vdev=net_tap1,iface=a2",
                "--vdev=net_bonding0,mode=4,slave=net_tap0,slave=net_tap1",
            ]
        );
    }

    /// A bond's af_packet members name kernel interfaces that must exist
    /// (its tap members make their own).
    #[test]
    fn a_bond_member_on_a_missing_interface_is_named() {
        let c = Config::parse(
            "[eal]\nlcores = [1]\n[[port]]\nname = \"bond0\"\ndevice = \"net_bonding0\"\n\
             bond_members = [\"net_af_packet0,iface=m1\", \"net_af_packet1,iface=m2\", \"net_tap0,iface=m3\"]\n\
             address = \"10.77.0.1/24\"\n",
        )
        .unwrap();
        let e = plan(&c, &machine(1 << 30), |i| i == "m1").unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.value.as_str()),
            ("port[0].bond_members[1]", "net_af_packet1,iface=m2")
        );
        assert!(e.reason.contains("\"m2\" does not exist"), "{e}");
        assert!(plan(&c, &machine(1 << 30), |i| i != "m3").is_ok());
    }

    #[test]
    fn eal_arguments() {
        let p = plan(&config(""), &machine(1 << 30), |_| true).unwrap();
        assert_eq!(p.main_lcore, 0);
        assert_eq!(
            p.eal_args,
            [
                "-l",
                "0,1",
                "--main-lcore=0",
                "--no-pci",
                "--vdev=net_af_packet0,iface=veth-dut",
                "--in-memory"
            ]
        );
        let p = plan(
            &config("args = [\"--file-prefix=x\"]"),
            &machine(1 << 30),
            |_| true,
        )
        .unwrap();
        assert!(!p.eal_args.contains(&"--in-memory".to_string()));
        assert!(p.eal_args.contains(&"--file-prefix=x".to_string()));
        // Without hugepages --in-memory cannot work: --no-huge --no-shconf.
        let p = plan(&config("args = [\"--in-memory\"]"), &machine(0), |_| true).unwrap();
        assert_eq!(&p.eal_args[5..], ["--no-huge", "--no-shconf", "-m", "512"]);
        // Memory for the mempools: more mbufs, a larger `-m`.
        let p = plan(&config("mbufs = 524288"), &machine(0), |_| true).unwrap();
        let mib = hugepage_need(&config("mbufs = 524288")).div_ceil(1 << 20);
        assert!(mib > 512);
        assert_eq!(
            &p.eal_args[p.eal_args.len() - 2..],
            ["-m".to_string(), mib.to_string()]
        );
        // "preferred" with a few free pages, fewer than dpd would make
        // there: normal pages (before, any free page chose hugepages, and
        // the mempools then failed for want of memory).
        let need = hugepage_need(&config(""));
        assert!((80 << 20..200 << 20).contains(&need), "{need}");
        let few = plan(&config(""), &machine(8 << 20), |_| true).unwrap();
        assert!(!few.use_hugepages && few.eal_args.contains(&"--no-huge".to_string()));
        assert!(
            plan(&config(""), &machine(need), |_| true)
                .unwrap()
                .use_hugepages
        );
        // A jumbo MTU's mbufs count too.
        let mut jumbo = config("");
        jumbo.ports[0].mtu = 9000;
        assert!(hugepage_need(&jumbo) > need + (60 << 20));
    }

    #[test]
    fn a_zero_copy_memif_client_gets_single_file_segments_in_hugepages() {
        let memif = |dev: &str| {
            Config::parse(&format!(
                "[eal]\nlcores = [1]\n[[port]]\nname = \"p0\"\ndevice = \"{dev}\"\naddress = \"10.77.0.1/24\"\n"
            ))
            .unwrap()
        };
        let zc =
            memif("net_memif0,role=client,socket=/tmp/m.sock,socket-abstract=no,zero-copy=yes");
        let p = plan(&zc, &machine(1 << 30), |_| true).unwrap();
        assert_eq!(
            &p.eal_args[5..],
            ["--in-memory", "--single-file-segments", "--no-telemetry"]
        );
        let e = plan(&zc, &machine(0), |_| true).unwrap_err();
        assert_eq!(e.field, "port[0].device");
        assert!(e.reason.contains("needs hugepages"), "{e}");
        // A copying client, or a server, needs neither.
        for dev in [
            "net_memif0,role=client,socket=/tmp/m.sock,socket-abstract=no",
            "net_memif0,role=server,zero-copy=yes",
        ] {
            let p = plan(&memif(dev), &machine(0), |_| true).unwrap();
            assert!(
                !p.eal_args.iter().any(|a| a == "--single-file-segments"),
                "{dev}"
            );
        }
    }

    #[test]
    fn engines_mapped_onto_cpus() {
        let mut c = config("");
        c.eal.lcores = vec![1, 2];
        c.eal.cpus = vec![0, 1];
        let p = plan(&c, &machine(0), |_| true).unwrap();
        assert_eq!(&p.eal_args[..2], ["--lcores=0@0,1@0,2@1", "--main-lcore=0"]);
        assert!(p.control_shares_cpu);
        let big = Machine {
            online_cpus: vec![0, 1, 2, 3],
            ..machine(0)
        };
        c.eal.cpus = vec![2, 3];
        let p = plan(&c, &big, |_| true).unwrap();
        assert_eq!(p.eal_args[0], "--lcores=0@0,1@2,2@3");
        assert!(!p.control_shares_cpu);
        c.eal.cpus = vec![2, 9];
        let e = plan(&c, &big, |_| true).unwrap_err();
        assert_eq!(e.field, "eal.cpus[1]");
    }

    #[test]
    fn machine_checks_name_the_field() {
        let mut c = config("");
        c.eal.lcores = vec![5];
        assert_eq!(
            plan(&c, &machine(0), |_| true).unwrap_err().field,
            "eal.lcores[0]"
        );
        c.eal.lcores = vec![0, 1];
        let e = plan(&c, &machine(0), |_| true).unwrap_err();
        assert!(e.reason.contains("control thread"), "{e}");
        let e = plan(&config(""), &machine(0), |_| false).unwrap_err();
        assert_eq!(e.field, "port[0].device");
        assert!(e.reason.contains("\"veth-dut\" does not exist"), "{e}");
        let e = plan(&config("hugepages = \"required\""), &machine(0), |_| true).unwrap_err();
        assert_eq!(
            (e.field.as_str(), e.value.as_str()),
            ("eal.hugepages", "required")
        );
        // Required: as much as dpd needs free, or refused naming both.
        let required = config("hugepages = \"required\"");
        let need = hugepage_need(&required);
        assert!(
            plan(&required, &machine(need), |_| true)
                .unwrap()
                .use_hugepages
        );
        let e = plan(&required, &machine(2 << 20), |_| true).unwrap_err();
        assert_eq!(e.field, "eal.hugepages");
        assert!(
            e.reason.contains("2 MiB of hugepages free")
                && e.reason
                    .contains(&format!("about {} MiB", need.div_ceil(1 << 20))),
            "{e}"
        );
        assert!(
            !plan(&config("hugepages = \"off\""), &machine(2 << 20), |_| true)
                .unwrap()
                .use_hugepages
        );
    }
}
