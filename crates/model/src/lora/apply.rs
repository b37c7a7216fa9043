//! The forward pass's side of LoRA: which rows of a batch compute with which adapter
//! (`LoraPlan`), and the low-rank products added to a matmul's output (`add_deltas`).
//!
//! For one matmul site (the weights that share an input: Q/K/V, the attention output, gate/up,
//! down, the output head), every adapter of the batch with its rows gathered: stage A computes
//! `t = x·Aᵀ` (`[rows][rank]`) for each (adapter, weight, block of rows), stage B
//! `δ = t·Bᵀ` for each (adapter, weight, block of outputs), each stage one parallel region
//! over all its jobs, each job one call of the kernels' float matmul (run inline on the
//! thread that claimed it, or on the whole pool when there is a single job). Then each row
//! gets `scale · δ` added, adapters in ascending id order: a row's result depends only on its
//! own input and adapters, so it is the same alone or batched (the kernels' outputs do not
//! depend on the number of rows).

use std::ops::Range;
use std::sync::Mutex;

use kernels::{matmul, MatmulScratch, Shares, Threads};
use runner::{Batch, LogitsWanted, LoraId};

use super::{LoraAdapter, LoraPair, Loras, Target};
use crate::ModelError;

/// One adapter's rows: in the batch, or among the logit rows.
struct Group {
    id: LoraId,
    /// Row indices, ascending.
    rows: Vec<usize>,
    /// Each row's user scale.
    scales: Vec<f32>,
}

impl Group {
    fn push(&mut self, rows: Range<usize>, scale: f32) {
        self.rows.extend(rows);
        self.scales.resize(self.rows.len(), scale);
    }
}

fn sized(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}

/// Which adapters each row of one batch computes with.
#[derive(Default)]
pub(crate) struct LoraPlan {
    ids: Vec<LoraId>,
    /// By ascending id: the batch's rows.
    groups: Vec<Group>,
    /// By ascending id: the logit rows (the rows the output head projects).
    head: Vec<Group>,
}

impl LoraPlan {
    /// The plan of `batch`, refusing adapters that are not loaded, an adapter named twice by a
    /// chunk, and scales that are not finite. Reuses its vectors.
    pub(crate) fn build(&mut self, batch: &Batch, loras: &Loras) -> Result<(), ModelError> {
        self.ids.clear();
        for (i, sc) in batch.seqs.iter().enumerate() {
            for (j, u) in sc.loras.iter().enumerate() {
                let bad = |m: String| Err(ModelError::BadBatch(format!("sequence {i}: {m}")));
                if loras.get(u.id).is_none() {
                    return bad(format!("LoRA adapter {} is not loaded", u.id.0));
                }
                if sc.loras[..j].iter().any(|v| v.id == u.id) {
                    return bad(format!("LoRA adapter {} is named twice", u.id.0));
                }
                if !u.scale.is_finite() {
                    return bad(format!("LoRA scale {} is not finite", u.scale));
                }
            }
            self.ids.extend(sc.loras.iter().map(|u| u.id));
        }
        self.ids.sort_unstable();
        self.ids.dedup();
        for list in [&mut self.groups, &mut self.head] {
            list.resize_with(self.ids.len(), || Group {
                id: LoraId(0),
                rows: Vec::new(),
                scales: Vec::new(),
            });
            for (g, &id) in list.iter_mut().zip(&self.ids) {
                g.id = id;
                g.rows.clear();
                g.scales.clear();
            }
        }
        let mut logit_row = 0;
        for sc in batch.seqs {
            let wanted = match sc.logits {
                LogitsWanted::None => 0..0,
                LogitsWanted::Last => sc.len - 1..sc.len,
                LogitsWanted::All => 0..sc.len,
            };
            for u in sc.loras.iter().filter(|u| u.scale != 0.0) {
                let Ok(g) = self.ids.binary_search(&u.id) else {
                    continue;
                };
                let rows = sc.first_token..sc.first_token + sc.len;
                self.groups[g].push(rows, u.scale);
                self.head[g].push(logit_row..logit_row + wanted.len(), u.scale);
            }
            logit_row += wanted.len();
        }
        Ok(())
    }
}

/// Where a matmul is: a layer's, or the output head.
#[derive(Clone, Copy)]
pub(crate) enum Site {
    Layer(usize),
    Head,
}

fn pair_of(a: &LoraAdapter, site: Site, t: Target) -> Option<&LoraPair> {
    match site {
        Site::Layer(li) => a.layers.get(li)?.pairs[t as usize].as_ref(),
        Site::Head => a.output.as_ref(),
    }
}

/// One matmul of a stage: `group`'s pair for output `out` (an index into the site's outputs),
/// on rows `rows` of the group (stage A) or for outputs `cols` of B (stage B).
#[derive(Clone)]
struct Job {
    group: usize,
    out: usize,
    part: Range<usize>,
    /// Offset of the job's input in the stage's input buffer, and its output's range.
    src: usize,
    dst: Range<usize>,
}

/// The plan of the current batch and the buffers of the LoRA products, reused across passes.
#[derive(Default)]
pub(crate) struct LoraScratch {
    pub(crate) plan: LoraPlan,
    bufs: Bufs,
}

#[derive(Default)]
struct Bufs {
    /// Each group's input rows, gathered (offset per group in `x_at`).
    xg: Vec<f32>,
    x_at: Vec<usize>,
    /// Stage A's outputs, and where each (group, output) starts in it.
    t: Vec<f32>,
    t_at: Vec<usize>,
    /// Stage B's outputs.
    d: Vec<f32>,
    jobs_a: Vec<Job>,
    jobs_b: Vec<Job>,
    mm: Vec<Mutex<MatmulScratch>>,
}

/// Rows (or outputs) per job: about four jobs per thread, at least `min` each.
fn block(len: usize, threads: usize, min: usize) -> usize {
    len.div_ceil(4 * threads).max(min)
}

/// One matmul site's adapters: what the stages look up.
struct Ctx<'a> {
    loras: &'a Loras,
    site: Site,
    targets: &'a [Target],
    d_in: usize,
    groups: &'a [Group],
}

impl Ctx<'_> {
    fn adapter(&self, g: usize) -> &LoraAdapter {
        let id = self.groups[g].id;
        self.loras.get(id).expect("the plan names loaded adapters")
    }

    /// Group `g`'s pair for output `oi`, if its adapter changes that weight.
    fn pair(&self, g: usize, oi: usize) -> Option<&LoraPair> {
        pair_of(self.adapter(g), self.site, self.targets[oi])
    }

    fn job_pair(&self, j: &Job) -> &LoraPair {
        self.pair(j.group, j.out).expect("a job has a pair")
    }
}

/// Adds every adapted row's `scale · B·A·x` to the outputs of `site`'s matmuls: `x`
/// (`[n][d_in]`) is their input, `outs[i]` (`[n][d_out]`) the output of weight `targets[i]`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_deltas(
    th: &Threads,
    loras: &Loras,
    s: &mut LoraScratch,
    site: Site,
    x: &[f32],
    d_in: usize,
    targets: &[Target],
    outs: &mut [&mut [f32]],
) {
    let groups = match site {
        Site::Head => &s.plan.head,
        Site::Layer(_) => &s.plan.groups,
    };
    if groups.iter().all(|g| g.rows.is_empty()) {
        return;
    }
    let cx = Ctx {
        loras,
        site,
        targets,
        d_in,
        groups,
    };
    let b = &mut s.bufs;
    let t_len = plan_stage_a(&cx, b, th.n());
    if b.jobs_a.is_empty() {
        return;
    }
    gather(&cx, x, b);
    b.mm.resize_with(th.n(), Mutex::default);
    let t = sized(&mut b.t, t_len);
    run_jobs(th, &b.mm, &b.jobs_a, t, &|j, out, mm| {
        let input = &b.xg[j.src..j.src + j.part.len() * d_in];
        matmul(
            th,
            &cx.job_pair(j).a_weights(),
            input,
            j.part.len(),
            out,
            mm,
        );
    });
    let d_len = plan_stage_b(&cx, b, th.n());
    let d = sized(&mut b.d, d_len);
    run_jobs(th, &b.mm, &b.jobs_b, d, &|j, out, _| {
        let (p, m) = (cx.job_pair(j), groups[j.group].rows.len());
        let input = &b.t[j.src..j.src + m * p.rank];
        p.t_times_bt(input, m, j.part.clone(), out);
    });
    add_rows(&cx, b, outs);
}

/// Lays out stage A (`x·Aᵀ` per group and output, in blocks of rows) and where each group's
/// gathered rows go; returns the length of its output.
fn plan_stage_a(cx: &Ctx, b: &mut Bufs, n_thr: usize) -> usize {
    let (mut x_len, mut t_len) = (0, 0);
    b.x_at.clear();
    b.t_at.clear();
    b.jobs_a.clear();
    for (gi, g) in cx.groups.iter().enumerate() {
        b.x_at.push(x_len);
        let m = g.rows.len();
        for oi in 0..cx.targets.len() {
            b.t_at.push(t_len);
            let Some(p) = cx.pair(gi, oi) else {
                continue;
            };
            let step = block(m, n_thr, 16);
            for r in (0..m).step_by(step) {
                let part = r..(r + step).min(m);
                let dst = t_len + part.start * p.rank..t_len + part.end * p.rank;
                let src = x_len + part.start * cx.d_in;
                let (group, out) = (gi, oi);
                b.jobs_a.push(Job {
                    group,
                    out,
                    part,
                    src,
                    dst,
                });
            }
            t_len += m * p.rank;
        }
        x_len += m * cx.d_in;
    }
    t_len
}

/// Each group's input rows, gathered into `b.xg` at `b.x_at`.
fn gather(cx: &Ctx, x: &[f32], b: &mut Bufs) {
    let d_in = cx.d_in;
    let len = cx.groups.iter().map(|g| g.rows.len() * d_in).sum();
    let xg = sized(&mut b.xg, len);
    for (g, &at) in cx.groups.iter().zip(&b.x_at) {
        for (i, &row) in g.rows.iter().enumerate() {
            let dst = &mut xg[at + i * d_in..at + (i + 1) * d_in];
            dst.copy_from_slice(&x[row * d_in..(row + 1) * d_in]);
        }
    }
}

/// Lays out stage B (`t·Bᵀ` per group and output, in blocks of outputs), groups in ascending
/// id order; returns the length of its output.
fn plan_stage_b(cx: &Ctx, b: &mut Bufs, n_thr: usize) -> usize {
    b.jobs_b.clear();
    let mut d_len = 0;
    for (gi, g) in cx.groups.iter().enumerate() {
        for oi in 0..cx.targets.len() {
            let Some(p) = cx.pair(gi, oi) else {
                continue;
            };
            let src = b.t_at[gi * cx.targets.len() + oi];
            let step = block(p.d_out, n_thr, 64);
            for c in (0..p.d_out).step_by(step) {
                let part = c..(c + step).min(p.d_out);
                let dst = d_len..d_len + g.rows.len() * part.len();
                d_len = dst.end;
                let (group, out) = (gi, oi);
                b.jobs_b.push(Job {
                    group,
                    out,
                    part,
                    src,
                    dst,
                });
            }
        }
    }
    d_len
}

/// Adds each row's deltas times its scale, groups in ascending id order (the jobs' order).
fn add_rows(cx: &Ctx, b: &Bufs, outs: &mut [&mut [f32]]) {
    for j in &b.jobs_b {
        let (g, p) = (&cx.groups[j.group], cx.job_pair(j));
        let alpha = cx.adapter(j.group).alpha;
        let (d_out, w) = (p.d_out, j.part.len());
        let out = &mut *outs[j.out];
        for (i, (&row, &user)) in g.rows.iter().zip(&g.scales).enumerate() {
            let scale = p.scale(alpha, user);
            let delta = &b.d[j.dst.start + i * w..j.dst.start + (i + 1) * w];
            let dst = &mut out[row * d_out + j.part.start..row * d_out + j.part.end];
            dst.iter_mut().zip(delta).for_each(|(o, v)| *o += scale * v);
        }
    }
}

/// Runs `f(job, its output, scratch)` for every job, in parallel on `th` (each job's matmul
/// then runs inline on its thread), or on the caller when there is one job (its matmul then
/// uses the whole pool).
fn run_jobs(
    th: &Threads,
    mm: &[Mutex<MatmulScratch>],
    jobs: &[Job],
    buf: &mut [f32],
    f: &(dyn Fn(&Job, &mut [f32], &mut MatmulScratch) + Sync),
) {
    let ranges: Vec<Range<usize>> = jobs.iter().map(|j| j.dst.clone()).collect();
    let outs = Shares::new(buf, &ranges);
    let lock = |t: usize| mm[t].lock().unwrap_or_else(|e| e.into_inner());
    if jobs.len() == 1 || th.n() == 1 {
        let mut scratch = lock(0);
        for (i, j) in jobs.iter().enumerate() {
            f(j, outs.take(i), &mut scratch);
        }
        return;
    }
    th.for_each_range(jobs.len(), 1, &|t, r| {
        let mut scratch = lock(t);
        for i in r {
            f(&jobs[i], outs.take(i), &mut scratch);
        }
    });
}
