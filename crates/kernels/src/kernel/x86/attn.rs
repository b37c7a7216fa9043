//! AVX2/FMA/F16C (and AVX-512 where noted) forms of the attention helpers in `crate::attn`:
//! `dots`, `axpy_block`, `softmax_f16`, `scale_round_f16` and `exp_neg` on eight lanes.
//!
//! Invariant: each function does the same operations per lane, in the same order, as its
//! portable form in `crate::attn`, with the accumulators held in registers, so both give the
//! same bits (the tests in `crate::attn` check it).
//!
//! Callers: only `crate::attn`, behind an `attn::Avx2` or `attn::Wide` value (which exist only
//! after run-time detection). The `#[inline(always)]` functions are meant to be inlined into a
//! caller's `#[target_feature(enable = "avx2,fma,f16c")]` entry point (the attention task), so the
//! intrinsics compile with those features and nothing per block crosses a call boundary.

use std::arch::x86_64::*;

use crate::attn::{Block, KvElem, Progress, KEYS1, KEYS4, KEYS_PER_BLOCK, KEYS_T, WIDE};

/// Eight elements as f32 (f16 bits converted with F16C, exactly).
///
/// # Safety
/// Eight elements readable at `p`; AVX and F16C enabled in the inlining function.
#[inline(always)]
unsafe fn load8<E: KvElem>(p: *const E) -> __m256 {
    // SAFETY: per the contract; the element type decides the load.
    unsafe {
        if std::mem::size_of::<E>() == 2 {
            _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
        } else {
            _mm256_loadu_ps(p.cast())
        }
    }
}

/// `x[i] = round_f16(x[i] * s)`, eight at a time through F16C (round to nearest even).
///
/// # Safety
/// AVX2 and F16C must be enabled in the inlining function.
#[inline(always)]
pub(crate) unsafe fn scale_round_f16(x: &mut [f32], s: f32) {
    let (chunks, tail) = x.as_chunks_mut::<8>();
    // SAFETY: each load and store covers one 8-float chunk; features per the contract.
    unsafe {
        let sv = _mm256_set1_ps(s);
        for c in chunks {
            let v = _mm256_mul_ps(_mm256_loadu_ps(c.as_ptr()), sv);
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    for v in tail {
        *v = crate::attn::round_f16(*v * s);
    }
}

/// `crate::attn::exp_neg` on eight lanes: the same operations, so the same bits.
///
/// # Safety
/// AVX2 and FMA must be enabled in the inlining function.
#[inline(always)]
pub(crate) unsafe fn exp_neg8(x: __m256) -> __m256 {
    use crate::attn::exp_consts::*;
    // SAFETY: register-only intrinsics; features per the contract.
    unsafe {
        let floor = _mm256_set1_ps(FLOOR);
        let small = _mm256_cmp_ps::<_CMP_LT_OQ>(x, floor);
        // `f32::max(x, FLOOR)` gives FLOOR for a NaN x; `max_ps` returns its second operand.
        let x = _mm256_max_ps(x, floor);
        let magic = _mm256_set1_ps(MAGIC);
        let t = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), magic);
        let n = _mm256_sub_ps(t, magic);
        let r = _mm256_fmadd_ps(
            n,
            _mm256_set1_ps(-LN2_LO),
            _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), x),
        );
        let mut p = _mm256_set1_ps(POLY[0]);
        for &c in &POLY[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let e = _mm256_add_epi32(
            _mm256_sub_epi32(
                _mm256_castps_si256(t),
                _mm256_set1_epi32(MAGIC.to_bits() as i32),
            ),
            _mm256_set1_epi32(127),
        );
        let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e));
        _mm256_andnot_ps(small, _mm256_mul_ps(p, scale))
    }
}

/// `crate::attn::softmax_f16` eight elements at a time: the max over eight lanes (exact, so any
/// order gives the scalar fold's value), `exp_neg8`, the f64 lane sums and the rounding as
/// the portable code does them.
///
/// # Safety
/// AVX2, FMA and F16C must be enabled in the inlining function.
#[inline(always)]
pub(crate) unsafe fn softmax_f16(sc: &mut [f32], sink: Option<f32>) {
    let (chunks, tail) = sc.as_chunks_mut::<8>();
    // SAFETY: each load and store covers one 8-float chunk; features per the contract.
    let (mut max, mut lanes) = unsafe {
        let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
        for c in chunks.iter() {
            // A NaN score is skipped, as `f32::max` skips it: `max_ps` returns its second
            // operand when either is NaN.
            m = _mm256_max_ps(_mm256_loadu_ps(c.as_ptr()), m);
        }
        let mut ms = [0.0f32; 8];
        _mm256_storeu_ps(ms.as_mut_ptr(), m);
        (
            ms.iter().copied().fold(f32::NEG_INFINITY, f32::max),
            [0.0f64; 8],
        )
    };
    max = tail.iter().copied().fold(max, f32::max);
    if let Some(s) = sink {
        max = max.max(s);
    }
    // SAFETY: as above.
    unsafe {
        let mv = _mm256_set1_ps(max);
        let (mut lo, mut hi) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        for c in chunks.iter_mut() {
            let e = exp_neg8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), mv));
            _mm256_storeu_ps(c.as_mut_ptr(), e);
            lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
            hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(e)));
        }
        _mm256_storeu_pd(lanes.as_mut_ptr(), lo);
        _mm256_storeu_pd(lanes.as_mut_ptr().add(4), hi);
    }
    let mut sum = lanes.iter().sum::<f64>();
    for v in tail.iter_mut() {
        *v = crate::attn::exp_neg(*v - max);
        sum += f64::from(*v);
    }
    if let Some(s) = sink {
        sum += f64::from(crate::attn::exp_neg(s - max));
    }
    let inv = (1.0 / sum) as f32;
    // SAFETY: features per the contract.
    unsafe { scale_round_f16(sc, inv) };
}

/// # Safety
/// AVX2, FMA and F16C must be enabled in the inlining function.
#[inline(always)]
pub(crate) unsafe fn dots<E: KvElem>(
    q: [&[f32]; 2],
    k: [&[E]; KEYS_PER_BLOCK],
) -> [[f32; KEYS_PER_BLOCK]; 2] {
    // SAFETY: forwarded.
    unsafe { dots_block(q, k) }
}

/// `crate::attn::dots1`: `dots_block` for one query row.
///
/// # Safety
/// AVX2, FMA and F16C must be enabled in the inlining function.
#[inline(always)]
pub(crate) unsafe fn dots1<E: KvElem>(q: &[f32], k: [&[E]; KEYS1]) -> [f32; KEYS1] {
    // SAFETY: forwarded.
    unsafe { dots_block([q], k)[0] }
}

/// `dots` for four query rows (heads sharing a KV head) by `KEYS4` key rows: each key
/// vector loaded (and converted) once for four heads. Sixteen accumulators plus the loads
/// need AVX-512VL's 32 vector registers.
///
/// # Safety
/// AVX-512F/VL, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
pub(crate) unsafe fn dots4<E: KvElem>(q: [&[f32]; 4], k: [&[E]; KEYS4]) -> [[f32; KEYS4]; 4] {
    // SAFETY: forwarded.
    unsafe { dots_block(q, k) }
}

/// `crate::attn::transpose16` on AVX-512: sixteen rows loaded (the missing ones zero), then four
/// stages of two-source permutes, stage `b` (1, 2, 4, 8) swapping the off-diagonal `b x b`
/// blocks of every `2b x 2b` block, whose own blocks the earlier stages transposed.
///
/// # Safety
/// AVX-512 F must be available; the shapes pass `crate::attn::check_transpose16`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn transpose16(
    src: &[f32],
    src_stride: usize,
    rows: usize,
    dst: &mut [f32],
    dst_stride: usize,
) {
    // SAFETY: row r < rows reads sixteen floats at r * src_stride and row i writes sixteen at
    // i * dst_stride, inside the slices by the contract; AVX-512 F per the contract.
    unsafe {
        let mut r: [__m512; KEYS_T] = std::array::from_fn(|i| {
            if i < rows {
                _mm512_loadu_ps(src.as_ptr().add(i * src_stride))
            } else {
                _mm512_setzero_ps()
            }
        });
        let mut b = 1;
        while b < KEYS_T {
            // Row p (bit b clear) keeps its own lanes with bit b clear and takes row q's lanes
            // j - b where bit b is set; row q the converse.
            let ip: [i32; 16] =
                std::array::from_fn(|j| if j & b == 0 { j } else { 16 + j - b } as i32);
            let iq: [i32; 16] =
                std::array::from_fn(|j| if j & b == 0 { j + b } else { 16 + j } as i32);
            let (ip, iq) = (
                _mm512_loadu_si512(ip.as_ptr().cast()),
                _mm512_loadu_si512(iq.as_ptr().cast()),
            );
            for p in 0..KEYS_T {
                if p & b == 0 {
                    let q = p | b;
                    let (rp, rq) = (r[p], r[q]);
                    r[p] = _mm512_permutex2var_ps(rp, ip, rq);
                    r[q] = _mm512_permutex2var_ps(rp, iq, rq);
                }
            }
            b *= 2;
        }
        for (i, v) in r.iter().enumerate() {
            _mm512_storeu_ps(dst.as_mut_ptr().add(i * dst_stride), *v);
        }
    }
}

/// `crate::attn::dots_t`: lane `j` of sixteen keys in one register (`acc[a][j]`), the
/// fused multiply-adds over elements `j`, `j + 8`, ... in order, then the eight lanes added in
/// order from the empty sum, and the (empty) tail added, as `dots_block` and `lane_sums8` do.
///
/// # Safety
/// AVX-512F/VL, AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
pub(crate) unsafe fn dots_t<const H: usize>(
    q: [&[f32]; H],
    kt: &[f32],
    stride: usize,
) -> [[f32; KEYS_T]; H] {
    let n = crate::attn::check_dots_t(q, kt, stride);
    // SAFETY: every load reads sixteen floats of row i < n at i * stride, inside `kt`
    // (checked), and q[a][i] with i < n; features per the contract.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 8]; H];
        let mut i = 0;
        while i < n {
            for j in 0..8 {
                let kv = _mm512_loadu_ps(kt.as_ptr().add((i + j) * stride));
                for (qa, acc_a) in q.iter().zip(acc.iter_mut()) {
                    let qv = _mm512_set1_ps(*qa.as_ptr().add(i + j));
                    acc_a[j] = _mm512_fmadd_ps(qv, kv, acc_a[j]);
                }
            }
            i += 8;
        }
        let empty: f32 = [0.0f32; 0].iter().sum();
        let e = _mm512_set1_ps(empty);
        let mut out = [[0.0f32; KEYS_T]; H];
        for a in 0..H {
            let mut sum = e;
            for lane in acc[a] {
                sum = _mm512_add_ps(sum, lane);
            }
            _mm512_storeu_ps(out[a].as_mut_ptr(), _mm512_add_ps(sum, e));
        }
        out
    }
}

/// `dot(q[a], k[b])` for `H` query rows by `K` key rows, each as a lone dot product would be
/// (eight lanes of fused multiply-adds in element order, then the lanes summed in order):
/// the blocking only shares the loads, so every block shape gives the same bits.
///
/// # Safety
/// AVX2, FMA and F16C must be enabled in the inlining function.
#[inline(always)]
unsafe fn dots_block<E: KvElem, const H: usize, const K: usize>(
    q: [&[f32]; H],
    k: [&[E]; K],
) -> [[f32; K]; H] {
    let n = q[0].len();
    assert!(
        q.iter().all(|r| r.len() == n) && k.iter().all(|r| r.len() == n),
        "dots: ragged rows"
    );
    let body = n - n % 8;
    // SAFETY: every load reads 8 elements at i < body <= len; features per the contract.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); K]; H];
        let mut i = 0;
        while i < body {
            let qv: [__m256; H] = std::array::from_fn(|a| _mm256_loadu_ps(q[a].as_ptr().add(i)));
            for b in 0..K {
                let kv = load8(k[b].as_ptr().add(i));
                for a in 0..H {
                    acc[a][b] = _mm256_fmadd_ps(qv[a], kv, acc[a][b]);
                }
            }
            i += 8;
        }
        // Each pair's lanes summed in order, eight pairs at a time (`lane_sums8`), into room
        // for the 16 pairs of the largest block (`dots4`).
        const { assert!(H * K <= 16, "dots_block: more pairs than lane-sum room") };
        let pairs = acc.as_flattened();
        let mut sums = [[0.0f32; 8]; 2];
        for (g, dst) in sums.iter_mut().enumerate().take((H * K).div_ceil(8)) {
            let v = std::array::from_fn(|j| {
                pairs.get(8 * g + j).copied().unwrap_or(_mm256_setzero_ps())
            });
            *dst = lane_sums8(v);
        }
        let sums = sums.as_flattened();
        let mut out = [[0.0f32; K]; H];
        for a in 0..H {
            for b in 0..K {
                let tail: f32 = q[a][body..]
                    .iter()
                    .zip(&k[b][body..])
                    .map(|(x, y)| x * y.to_f32())
                    .sum();
                out[a][b] = sums[a * K + b] + tail;
            }
        }
        out
    }
}

/// `crate::attn::dots_own`: one 8-lane accumulator per pair, the operations of `dots_block`
/// per pair, eight pairs' lanes summed by one `lane_sums8`.
///
/// # Safety
/// AVX2, FMA and F16C must be enabled in the inlining function.
#[inline(always)]
pub(crate) unsafe fn dots_own<E: KvElem, const H: usize>(q: [&[f32]; H], k: [&[E]; H]) -> [f32; H] {
    const { assert!(H <= 16, "dots_own: more pairs than lane-sum room") };
    let n = q[0].len();
    assert!(
        q.iter().all(|r| r.len() == n) && k.iter().all(|r| r.len() == n),
        "dots_own: ragged rows"
    );
    let body = n - n % 8;
    // SAFETY: every load reads 8 elements at i < body <= len; features per the contract.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); H];
        let mut i = 0;
        while i < body {
            for a in 0..H {
                let kv = load8(k[a].as_ptr().add(i));
                acc[a] = _mm256_fmadd_ps(_mm256_loadu_ps(q[a].as_ptr().add(i)), kv, acc[a]);
            }
            i += 8;
        }
        let mut sums = [[0.0f32; 8]; 2];
        for (g, dst) in sums.iter_mut().enumerate().take(H.div_ceil(8)) {
            let v =
                std::array::from_fn(|j| acc.get(8 * g + j).copied().unwrap_or(_mm256_setzero_ps()));
            *dst = lane_sums8(v);
        }
        let sums = sums.as_flattened();
        std::array::from_fn(|a| {
            let tail: f32 = q[a][body..]
                .iter()
                .zip(&k[a][body..])
                .map(|(x, y)| x * y.to_f32())
                .sum();
            sums[a] + tail
        })
    }
}

/// `v[p]`'s eight lanes summed in lane order for each `p`, as `lanes.iter().sum::<f32>()`
/// does it (from the same empty-sum value), by a transpose and seven vertical adds.
///
/// # Safety
/// AVX must be enabled in the inlining function.
#[inline(always)]
unsafe fn lane_sums8(v: [__m256; 8]) -> [f32; 8] {
    // SAFETY: register-only intrinsics and one 8-float store; features per the contract.
    unsafe {
        let t: [__m256; 8] = std::array::from_fn(|j| {
            let (x, y) = (v[j / 2 * 2], v[j / 2 * 2 + 1]);
            if j % 2 == 0 {
                _mm256_unpacklo_ps(x, y) // x0 y0 x1 y1 | x4 y4 x5 y5
            } else {
                _mm256_unpackhi_ps(x, y) // x2 y2 x3 y3 | x6 y6 x7 y7
            }
        });
        // s[4h + i]: lanes i and i + 4 of vectors 4h..4h + 4.
        let s = [
            _mm256_shuffle_ps::<0x44>(t[0], t[2]),
            _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
            _mm256_shuffle_ps::<0x44>(t[1], t[3]),
            _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
            _mm256_shuffle_ps::<0x44>(t[4], t[6]),
            _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
            _mm256_shuffle_ps::<0x44>(t[5], t[7]),
            _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
        ];
        let empty: f32 = [0.0f32; 0].iter().sum();
        let mut sum = _mm256_set1_ps(empty);
        for lane in 0..8 {
            let (lo, hi) = (s[lane % 4], s[4 + lane % 4]);
            let l = if lane < 4 {
                _mm256_permute2f128_ps::<0x20>(lo, hi)
            } else {
                _mm256_permute2f128_ps::<0x31>(lo, hi)
            };
            sum = _mm256_add_ps(sum, l);
        }
        let mut out = [0.0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), sum);
        out
    }
}

/// Sixteen elements as f32 (f16 bits converted exactly).
///
/// # Safety
/// Sixteen elements readable at `p`; AVX-512F enabled in the inlining function.
#[inline(always)]
unsafe fn load16<E: KvElem>(p: *const E) -> __m512 {
    // SAFETY: per the contract; the element type decides the load.
    unsafe {
        if std::mem::size_of::<E>() == 2 {
            _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
        } else {
            _mm512_loadu_ps(p.cast())
        }
    }
}

/// 512-bit `axpy_block`: 64 floats of each of the `N` heads' accumulators stay in registers
/// (16 at most) across the positions, so each broadcast weight feeds four multiply-adds and
/// the loop carries no per-element bounds checks. Per element the same fused multiply-adds
/// in the same position order as the portable form: the same bits.
///
/// # Safety
/// AVX-512F must be available; `b.hd % WIDE == 0`; slices as the portable `axpy_block`
/// requires (checked here: out-of-range shapes panic).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) unsafe fn axpy_block_512<'v, const N: usize, E: KvElem + 'v, P: Progress>(
    acc: &mut [f32],
    w: &[f32],
    b: &Block<P>,
    v: impl Fn(usize) -> &'v [E],
) {
    let (hd, span, base) = (b.hd, b.span, b.base);
    let (p0, p1) = (b.positions.start, b.positions.end);
    if p0 >= p1 {
        return;
    }
    assert!(
        acc.len() >= N * hd
            && hd % WIDE == 0
            && p0 >= base
            && (N - 1) * span + p1 - base <= w.len(),
        "axpy_block_512: shapes"
    );
    let mut d = 0;
    while d < hd {
        // SAFETY: d + WIDE <= hd and acc holds N * hd floats; the weights read are
        // w[h * span + pos - base] for pos < p1, within `w` (asserted); each value row holds
        // hd elements (the slice indexing checks it); features per the contract.
        unsafe {
            let mut a = [[_mm512_setzero_ps(); 4]; N];
            for (h, ah) in a.iter_mut().enumerate() {
                for (j, x) in ah.iter_mut().enumerate() {
                    *x = _mm512_loadu_ps(acc.as_ptr().add(h * hd + d + 16 * j));
                }
            }
            let wp: [*const f32; N] = std::array::from_fn(|h| w.as_ptr().add(h * span + p0 - base));
            for (i, pos) in (p0..p1).enumerate() {
                let vr = v(pos)[d..d + WIDE].as_ptr();
                let vs: [__m512; 4] = std::array::from_fn(|j| load16(vr.add(16 * j)));
                for (h, ah) in a.iter_mut().enumerate() {
                    let wt = _mm512_set1_ps(*wp[h].add(i));
                    for j in 0..4 {
                        ah[j] = _mm512_fmadd_ps(wt, vs[j], ah[j]);
                    }
                }
            }
            for (h, ah) in a.iter().enumerate() {
                for (j, x) in ah.iter().enumerate() {
                    _mm512_storeu_ps(acc.as_mut_ptr().add(h * hd + d + 16 * j), *x);
                }
            }
        }
        d += WIDE;
        b.next.upto(d, hd);
    }
}

/// # Safety
/// AVX2 and FMA must be enabled in the inlining function; `b.hd % 16 == 0`; slices as the
/// portable `axpy_block` requires.
#[inline(always)]
pub(crate) unsafe fn axpy_block<'v, const N: usize, E: KvElem + 'v, P: Progress>(
    acc: &mut [f32],
    w: &[f32],
    b: &Block<P>,
    v: impl Fn(usize) -> &'v [E],
) {
    let (hd, span, base) = (b.hd, b.span, b.base);
    assert!(acc.len() >= N * hd && hd % 16 == 0, "axpy_block: shapes");
    let mut d = 0;
    while d < hd {
        // SAFETY: d + 16 <= hd and acc holds N * hd floats; each value row holds hd floats
        // (the slice indexing below checks it); features per the contract.
        unsafe {
            let mut a = [[_mm256_setzero_ps(); 2]; N];
            for (h, ah) in a.iter_mut().enumerate() {
                ah[0] = _mm256_loadu_ps(acc.as_ptr().add(h * hd + d));
                ah[1] = _mm256_loadu_ps(acc.as_ptr().add(h * hd + d + 8));
            }
            for pos in b.positions.clone() {
                let vr = &v(pos)[d..d + 16];
                let v0 = load8(vr.as_ptr());
                let v1 = load8(vr.as_ptr().add(8));
                for (h, ah) in a.iter_mut().enumerate() {
                    let wt = _mm256_set1_ps(w[h * span + pos - base]);
                    ah[0] = _mm256_fmadd_ps(wt, v0, ah[0]);
                    ah[1] = _mm256_fmadd_ps(wt, v1, ah[1]);
                }
            }
            for (h, ah) in a.iter().enumerate() {
                _mm256_storeu_ps(acc.as_mut_ptr().add(h * hd + d), ah[0]);
                _mm256_storeu_ps(acc.as_mut_ptr().add(h * hd + d + 8), ah[1]);
            }
        }
        d += 16;
        b.next.upto(d, hd);
    }
}

/// The loop both widths of `crate::attn::axpy_rows` share: positions in order, each row's heads
/// in turn, `head(a, x, wt)` adding `wt` times the head's `hd` values at `x` into its `hd`
/// floats at `a`; `b.next` told after each position.
///
/// # Safety
/// The shapes passed `axpy_rows`' check (`acc` holds `heads * hd` floats, `w` every head's
/// scores of the positions; each row is checked here to hold `heads * hd` elements); `head`
/// reads and writes only `hd` elements at `a` and `x`.
#[inline(always)]
unsafe fn rows_each<'v, E: KvElem + 'v, P: Progress>(
    acc: &mut [f32],
    w: &[f32],
    b: &Block<P>,
    heads: usize,
    v: impl Fn(usize) -> &'v [E],
    head: impl Fn(*mut f32, *const E, f32),
) {
    let (hd, span, base) = (b.hd, b.span, b.base);
    let (p0, p1) = (b.positions.start, b.positions.end);
    for (i, pos) in (p0..p1).enumerate() {
        let row = &v(pos)[..heads * hd];
        for h in 0..heads {
            // SAFETY: h * span + pos - base < w.len() and acc holds heads * hd floats (the
            // contract); row holds heads * hd elements (sliced above).
            unsafe {
                let wt = *w.as_ptr().add(h * span + pos - base);
                head(acc.as_mut_ptr().add(h * hd), row.as_ptr().add(h * hd), wt);
            }
        }
        b.next.upto(i + 1, p1 - p0);
    }
}

/// 512-bit `crate::attn::axpy_rows`: each head's accumulator updated sixteen floats at a time,
/// per element the fused multiply-add of the portable form, positions in order.
///
/// # Safety
/// AVX-512F, AVX2, FMA and F16C must be available; `b.hd % 16 == 0`; the shapes as
/// `rows_each` requires.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(crate) unsafe fn axpy_rows_512<'v, E: KvElem + 'v, P: Progress>(
    acc: &mut [f32],
    w: &[f32],
    b: &Block<P>,
    heads: usize,
    v: impl Fn(usize) -> &'v [E],
) {
    let hd = b.hd;
    let head = |a: *mut f32, x: *const E, wt: f32| {
        // SAFETY: `rows_each` gives `hd` elements at `a` and `x`; d + 16 <= hd; features per
        // the contract.
        unsafe {
            let (wt, mut d) = (_mm512_set1_ps(wt), 0);
            while d < hd {
                let s = _mm512_fmadd_ps(wt, load16(x.add(d)), _mm512_loadu_ps(a.add(d)));
                _mm512_storeu_ps(a.add(d), s);
                d += 16;
            }
        }
    };
    // SAFETY: shapes per the contract; `head` touches `hd` elements.
    unsafe { rows_each(acc, w, b, heads, v, head) };
}

/// 256-bit `crate::attn::axpy_rows`, eight floats at a time.
///
/// # Safety
/// AVX2, FMA and F16C must be enabled in the inlining function; `b.hd % 8 == 0`; the shapes
/// as `rows_each` requires.
#[inline(always)]
pub(crate) unsafe fn axpy_rows<'v, E: KvElem + 'v, P: Progress>(
    acc: &mut [f32],
    w: &[f32],
    b: &Block<P>,
    heads: usize,
    v: impl Fn(usize) -> &'v [E],
) {
    let hd = b.hd;
    let head = |a: *mut f32, x: *const E, wt: f32| {
        // SAFETY: as in `axpy_rows_512`, eight floats at a time.
        unsafe {
            let (wt, mut d) = (_mm256_set1_ps(wt), 0);
            while d < hd {
                let s = _mm256_fmadd_ps(wt, load8(x.add(d)), _mm256_loadu_ps(a.add(d)));
                _mm256_storeu_ps(a.add(d), s);
                d += 8;
            }
        }
    };
    // SAFETY: shapes per the contract; `head` touches `hd` elements.
    unsafe { rows_each(acc, w, b, heads, v, head) };
}
