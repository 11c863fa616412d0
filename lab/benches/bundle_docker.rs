//! Benchmark: saving and loading one ~200 MB image through ocm-lab's bundle code (Docker API, streamed)
//! against `docker save` / `docker load` on the same engine, in one run. Also the growth of this process's
//! peak memory (VmHWM) during ocm-lab's save and load, which must not grow with the image size.
//!
//! The image is made here (`docker import` of a root file system holding one file of pseudo-random bytes),
//! so nothing is pulled; it and the archives are removed at the end. Needs the `docker` CLI and a daemon.
//!
//! `cargo bench --bench bundle_docker [-- SIZE_MB]` (default 200)

use std::io::Write as _;
use std::process::Command;
use std::time::Instant;

use ocm_lab::backend::docker::Docker;

const IMAGE: &str = "ocm-lab-bench/bundle:200mb";

fn docker(args: &[&str]) {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI runs");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Peak resident memory of this process so far, in KiB (Linux).
fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn make_image(dir: &std::path::Path, mb: usize) {
    // A root file system with one file of incompressible bytes, written in 1 MiB chunks.
    let data = dir.join("blob");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&data).unwrap());
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut chunk = vec![0u8; 1 << 20];
    for _ in 0..mb {
        for b in chunk.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
        }
        w.write_all(&chunk).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let rootfs = dir.join("rootfs.tar");
    let status = Command::new("tar")
        .args([
            "-C",
            dir.to_str().unwrap(),
            "-cf",
            rootfs.to_str().unwrap(),
            "blob",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::remove_file(&data).unwrap();
    docker(&["import", rootfs.to_str().unwrap(), IMAGE]);
    std::fs::remove_file(&rootfs).unwrap();
}

fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / secs
}

fn main() {
    let mb: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let d = rt.block_on(Docker::connect()).expect("Docker reachable");
    let dir = tempfile::tempdir_in(".").unwrap();
    make_image(dir.path(), mb);

    // docker save / docker load (the CLI streams the same API endpoints to a file).
    let cli_archive = dir.path().join("cli.tar");
    let t = Instant::now();
    docker(&["save", "-o", cli_archive.to_str().unwrap(), IMAGE]);
    let cli_save = t.elapsed().as_secs_f64();
    let size = std::fs::metadata(&cli_archive).unwrap().len();
    docker(&["rmi", IMAGE]);
    let t = Instant::now();
    docker(&["load", "-q", "-i", cli_archive.to_str().unwrap()]);
    let cli_load = t.elapsed().as_secs_f64();
    std::fs::remove_file(&cli_archive).unwrap();

    // ocm-lab: bundle save (export, hash, tar with manifest) and load (verify, then import).
    let bundle = dir.path().join("lab-bundle.tar");
    let hwm0 = vm_hwm_kib();
    let t = Instant::now();
    let manifest = rt
        .block_on(d.save_bundle(&[IMAGE.to_owned()], &bundle))
        .unwrap();
    let lab_save = t.elapsed().as_secs_f64();
    let hwm1 = vm_hwm_kib();
    docker(&["rmi", IMAGE]);
    let t = Instant::now();
    rt.block_on(d.load_bundle(&bundle)).unwrap();
    let lab_load = t.elapsed().as_secs_f64();
    let hwm2 = vm_hwm_kib();
    let item = &manifest.items[0];
    docker(&["rmi", IMAGE]);

    println!(
        "image: {IMAGE}, docker save archive {:.1} MiB, bundle entry {:.1} MiB",
        size as f64 / 1048576.0,
        item.size as f64 / 1048576.0
    );
    println!(
        "save: docker save {cli_save:.2} s ({:.0} MiB/s); ocm-lab bundle save {lab_save:.2} s ({:.0} MiB/s); ratio {:.2}x",
        mb_per_s(size, cli_save),
        mb_per_s(item.size, lab_save),
        mb_per_s(item.size, lab_save) / mb_per_s(size, cli_save)
    );
    println!(
        "load: docker load {cli_load:.2} s ({:.0} MiB/s); ocm-lab bundle load (verify + import) {lab_load:.2} s ({:.0} MiB/s); ratio {:.2}x",
        mb_per_s(size, cli_load),
        mb_per_s(item.size, lab_load),
        mb_per_s(item.size, lab_load) / mb_per_s(size, cli_load)
    );
    if let (Some(a), Some(b), Some(c)) = (hwm0, hwm1, hwm2) {
        println!(
            "peak memory of this process: {:.1} MiB before, +{:.1} MiB after save, +{:.1} MiB after load (image {mb} MiB)",
            a as f64 / 1024.0,
            (b - a) as f64 / 1024.0,
            (c - a) as f64 / 1024.0
        );
    }
}
