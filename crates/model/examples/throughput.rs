//! Model-level benchmark (no server): prefill and decode throughput of one model.
//!
//! `cargo run --release -p tessera-model --example throughput -- [MODEL] [--threads N]
//!  [--batches 1,4,16,64] [--prompt 512] [--decode 128] [--context 16] [--rounds 1]
//!  [--json FILE]`, or `... --example throughput -- --probe` for the core-to-core round trip alone.
//!
//! Reports, like llama-bench's pp512 / tg128 and llama-batched-bench:
//! - prefill tok/s of one `--prompt`-token prompt (one forward pass per 512-token chunk);
//! - decode tok/s of `--decode` steps for each batch size B (B sequences, one token each per step,
//!   each with a `--context`-token prompt already in the cache), counted over all B sequences.
//!
//! With `--rounds N` the batch sizes are measured in turn N times, so a drift in the machine's
//! load touches them alike; it then prints each size's median and, for each size B, the median
//! over rounds of batch B / batch 1 (when 1 is among the sizes).
//!
//! Each round's lines also give the core-to-core round trip measured just before and just after
//! each measurement (see `round_trip_ns`): it tells which of the machine's two states it ran
//! in, and the batch B / batch 1 ratio is also given over the rounds run wholly in each state.
//!
//! Each measurement's KV pool is faulted in before its clock starts, as a server's pool is once
//! it has warmed (the engine does it while idle) and as llama.cpp clears its KV buffer when it
//! creates a context; a fresh pool would add the kernel's page clearing to the first steps.

use std::time::Instant;

use model::{LogitsWanted, Session};

struct Args {
    model: String,
    threads: usize,
    batches: Vec<usize>,
    prompt: usize,
    decode: usize,
    /// Prompt tokens each decoding sequence has in the cache before the timed steps.
    context: usize,
    rounds: usize,
    json: Option<String>,
    /// Print the core-to-core round trip (`round_trip_ns`) and exit, without a model: scripts
    /// that time other programs tell the machine's state with it.
    probe: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        model: "models/gemma-3-270m-q4_k_m.gguf".into(),
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        batches: vec![1, 4, 16, 64],
        prompt: 512,
        decode: 128,
        context: 16,
        rounds: 1,
        json: None,
        probe: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        let num = |s: String| s.parse::<usize>().map_err(|e| format!("{s}: {e}"));
        match arg.as_str() {
            "--threads" => a.threads = num(val("--threads")?)?,
            "--prompt" => a.prompt = num(val("--prompt")?)?,
            "--decode" => a.decode = num(val("--decode")?)?,
            "--context" => a.context = num(val("--context")?)?.max(1),
            "--rounds" => a.rounds = num(val("--rounds")?)?.max(1),
            "--json" => a.json = Some(val("--json")?),
            "--probe" => a.probe = true,
            "--batches" => {
                a.batches = val("--batches")?
                    .split(',')
                    .map(|s| num(s.to_string()))
                    .collect::<Result<_, _>>()?
            }
            s if !s.starts_with("--") => a.model = s.to_string(),
            s => return Err(format!("unknown flag {s}")),
        }
    }
    Ok(a)
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if args.probe {
        println!("core-to-core {:.0} ns", round_trip_ns());
        return;
    }
    let m = match model::load(std::path::Path::new(&args.model), args.threads) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let mut tf = m.transformer;
    let vocab = tf.config().vocab_size as u32;
    // Deterministic pseudo-text: token ids spread over the vocabulary.
    let token = |i: usize| 1000 + (i as u32).wrapping_mul(7919) % (vocab - 2000);
    let mut logits = Vec::new();
    let mut results = Vec::new();

    // Warm-up (page in the weights, size the buffers).
    let mut s = Session::new(&tf, 1, 64, 16);
    let warm: Vec<u32> = (0..32).map(token).collect();
    s.prefill(&mut tf, 0, &warm, 512).expect("warm-up runs");

    // Prefill.
    let prompt: Vec<u32> = (0..args.prompt).map(token).collect();
    let mut s = Session::new(&tf, 1, args.prompt + 1, 16);
    s.populate();
    let t = Instant::now();
    s.prefill(&mut tf, 0, &prompt, 512).expect("prefill runs");
    let pp = args.prompt as f64 / t.elapsed().as_secs_f64();
    println!(
        "prefill  {:>4} tokens            {pp:>8.1} tok/s",
        args.prompt
    );
    results.push(format!("\"pp{}\": {pp:.2}", args.prompt));

    // Decode at each batch size, the sizes in turn for each round.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); args.batches.len()];
    // Per size and round: on two core complexes or one, if the same before and after.
    let mut states: Vec<Vec<Option<bool>>> = vec![Vec::new(); args.batches.len()];
    for round in 0..args.rounds {
        for (bi, &b) in args.batches.iter().enumerate() {
            let before = round_trip_ns();
            let tg = decode_rate(&mut tf, b, &args, &token, &mut logits);
            let after = round_trip_ns();
            let two = |ns: f64| ns >= TWO_COMPLEXES_NS;
            states[bi].push((two(before) == two(after)).then_some(two(before)));
            let tag = if args.rounds > 1 {
                format!(
                    " (round {}, core-to-core {before:.0} / {after:.0} ns)",
                    round + 1
                )
            } else {
                String::new()
            };
            println!(
                "decode   batch {b:>3} x {} steps   {tg:>8.1} tok/s{tag}",
                args.decode
            );
            rates[bi].push(tg);
        }
    }
    report_batches(&args, &rates, &states, &mut results);
    if let Some(path) = args.json {
        let body = format!(
            "{{\"threads\": {}, {}}}\n",
            args.threads,
            results.join(", ")
        );
        if let Err(e) = std::fs::write(&path, body) {
            eprintln!("error: writing {path}: {e}");
            std::process::exit(1);
        }
    }
}

/// Prints each batch size's median rate and, over several rounds, its ratio to batch 1 (also
/// over the rounds run wholly in each machine state); adds the medians to `results`.
fn report_batches(
    args: &Args,
    rates: &[Vec<f64>],
    states: &[Vec<Option<bool>>],
    results: &mut Vec<String>,
) {
    let one = args.batches.iter().position(|&b| b == 1);
    for (bi, &b) in args.batches.iter().enumerate() {
        let med = median(&rates[bi]);
        if args.rounds > 1 {
            println!("median   batch {b:>3}                 {med:>8.1} tok/s");
        }
        results.push(format!("\"tg{}_b{b}\": {med:.2}", args.decode));
        if let Some(o) = one.filter(|&o| o != bi && args.rounds > 1) {
            let ratios: Vec<f64> = rates[bi]
                .iter()
                .zip(&rates[o])
                .map(|(x, y)| x / y)
                .collect();
            let list: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "ratio    batch {b:>3} / batch 1         {:>8.2}x median of {}",
                median(&ratios),
                list.join(" ")
            );
            // The same over the rounds whose two measurements ran in one state.
            for (two, name) in [(false, "one core complex"), (true, "two core complexes")] {
                let same: Vec<f64> = (0..ratios.len())
                    .filter(|&r| states[bi][r] == Some(two) && states[o][r] == Some(two))
                    .map(|r| ratios[r])
                    .collect();
                if !same.is_empty() {
                    println!(
                        "ratio    batch {b:>3} / batch 1, {name}: {:.2}x median of {} rounds",
                        median(&same),
                        same.len()
                    );
                }
            }
        }
    }
}

/// Decode tok/s of `args.decode` steps over `b` sequences, each with `args.context` tokens
/// already in the cache.
fn decode_rate(
    tf: &mut model::Transformer,
    b: usize,
    args: &Args,
    token: &impl Fn(usize) -> u32,
    logits: &mut Vec<f32>,
) -> f64 {
    let ctx = args.context + args.decode + 1;
    let mut s = Session::new(tf, b, ctx, 16);
    s.populate();
    for i in 0..b {
        let p: Vec<u32> = (0..args.context).map(|j| token(i * 16 + j)).collect();
        s.prefill(tf, i, &p, 512).expect("prefill runs");
    }
    let toks: Vec<[u32; 1]> = (0..b).map(|i| [token(i)]).collect();
    let t = Instant::now();
    for _ in 0..args.decode {
        let work: Vec<(usize, &[u32], LogitsWanted)> = toks
            .iter()
            .enumerate()
            .map(|(i, tk)| (i, &tk[..], LogitsWanted::Last))
            .collect();
        s.run(tf, &work, logits).expect("decode runs");
    }
    (b * args.decode) as f64 / t.elapsed().as_secs_f64()
}

/// A round trip at least this long means the two threads ran on two core complexes.
const TWO_COMPLEXES_NS: f64 = 150.0;

/// Median time for one cache line to go to another thread and back (spinning on an atomic), in
/// ns: the machine's state at the time. A virtual machine's two CPUs on one core complex take
/// ~55 ns here, on two ~350 ns — and on two, each has its own memory link, so single-sequence
/// decode (bound by memory) runs ~30% faster while batches, which share data between the
/// threads every step, run slower. It is printed with each round so rounds can be compared
/// like with like.
fn round_trip_ns() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    const N: u64 = 20_000;
    let flag = AtomicU64::new(0);
    let mut t = Vec::with_capacity(5);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for i in 0..5 * N {
                while flag.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                flag.store(2 * i + 2, Ordering::Release);
            }
        });
        for rep in 0..5 {
            let start = Instant::now();
            for i in rep * N..(rep + 1) * N {
                flag.store(2 * i + 1, Ordering::Release);
                while flag.load(Ordering::Acquire) != 2 * i + 2 {
                    std::hint::spin_loop();
                }
            }
            t.push(start.elapsed().as_secs_f64() * 1e9 / N as f64);
        }
    });
    median(&t)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}
