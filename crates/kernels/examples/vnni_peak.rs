//! The machine's int8 multiply-add peak, measured: independent chains of `vpdpbusd` (512-bit,
//! register operands; and with the activation broadcast from memory, as the packed kernels use
//! it), on 1 and on N threads. The ceiling that the batched matmul and the model-level
//! benchmarks are compared against in docs/BENCHMARKS.md.
//!
//! `cargo run --release -p tessera-kernels --example vnni_peak -- [THREADS]`

#[cfg(target_arch = "x86_64")]
mod peak {
    use std::arch::x86_64::*;

    const CHAINS: usize = 12;

    /// `iters` rounds of CHAINS independent `vpdpbusd`; returns a checksum (keeps the work).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F/BW and VNNI (`main` checks them first).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn registers(iters: u64) -> i32 {
        let w = _mm512_set1_epi8(3);
        let x = _mm512_set1_epi8(5);
        let mut a = [_mm512_setzero_si512(); CHAINS];
        for _ in 0..iters {
            for acc in a.iter_mut() {
                *acc = _mm512_dpbusd_epi32(*acc, w, x);
            }
        }
        // SAFETY: AVX-512F is enabled in this function.
        unsafe { lane_sum(&a) }
    }

    /// As `registers`, with the second operand broadcast from memory (four bytes).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F/BW and VNNI (`main` checks them first).
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn broadcast(iters: u64, mem: &[i32; 64]) -> i32 {
        let w = _mm512_set1_epi8(3);
        let mut a = [_mm512_setzero_si512(); CHAINS];
        for i in 0..iters {
            let base = (i as usize) & 31;
            for (k, acc) in a.iter_mut().enumerate() {
                // SAFETY: base + k < 64.
                let x = _mm512_set1_epi32(unsafe { std::ptr::read_volatile(&mem[base + k]) });
                *acc = _mm512_dpbusd_epi32(*acc, w, x);
            }
        }
        // SAFETY: AVX-512F is enabled in this function.
        unsafe { lane_sum(&a) }
    }

    /// The sum of the sixteen lanes of the chains' total (keeps the work observable).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    unsafe fn lane_sum(a: &[__m512i]) -> i32 {
        let total = a
            .iter()
            .fold(_mm512_setzero_si512(), |s, v| _mm512_add_epi32(s, *v));
        _mm512_reduce_add_epi32(total)
    }

    pub const PER_ROUND: u64 = CHAINS as u64;
}

#[cfg(target_arch = "x86_64")]
fn main() {
    if !(std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vnni"))
    {
        eprintln!("this CPU has no AVX-512 VNNI");
        std::process::exit(1);
    }
    let max_threads: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let iters = 400_000_000 / peak::PER_ROUND;
    let mem = [1i32; 64];
    for threads in [1, max_threads] {
        for form in ["registers", "broadcast from memory"] {
            let t = std::time::Instant::now();
            let sum: i64 = std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads)
                    .map(|_| {
                        let mem = &mem;
                        s.spawn(move || {
                            // SAFETY: the features were detected above.
                            i64::from(unsafe {
                                if form == "registers" {
                                    peak::registers(iters)
                                } else {
                                    peak::broadcast(iters, mem)
                                }
                            })
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap_or(0)).sum()
            });
            let secs = t.elapsed().as_secs_f64();
            let instr = (iters * peak::PER_ROUND * threads as u64) as f64;
            println!(
                "{threads} thread(s), {form:>22}: {:6.2} G vpdpbusd/s = {:6.1} G int8 multiply-adds/s (checksum {sum})",
                instr / secs / 1e9,
                instr * 64.0 / secs / 1e9,
            );
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    eprintln!("x86-64 only");
}
