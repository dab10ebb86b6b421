// STRAY ATTACK 1: the real kernel runs BETWEEN the timed calls, launched by the main thread after
// the call's window, its drain and the judge's bracket have all closed; its CUPTI record is either
// dressed as the harness's own between-calls kernel or labelled with an external id no call has.
// Written against /work/main at 81aacf0 (defenses of 1929890). NOT run on a GPU (none here).
//
// The timed path (cuda_timer.cpp time_eager under cuda_child.cpp trace_call), for one timed call:
//   flush (memset, stream_) -> before() = judge go -> start event -> trace_.begin(id) [push id,
//   window opens] -> CALL -> trace_.end() [window closes, id popped] -> stop event (legacy) ->
//   cudaEventSynchronize(stop) -> t0; cudaDeviceSynchronize() [the drain]; t1 -> after() = the
//   judge's done (write, then a blocking read() of its answer: judge_link.cpp call_end) ->
//   shape_measure.cpp:227 check_guards -> compare_cuda.cu first_difference: memcpy H2D,
//   first_difference_kernel, memcpy D2H, cudaStreamSynchronize(stream_) -> [maybe a re-check]
//   -> next prepare_timed_call (copies on stream_).
// Nothing times the stretch from the drain's end to the next call's flush, and
// check_guards' cudaStreamSynchronize waits there for whatever is on stream_.
//
// In a timed call (told by a CUPTI external id on the thread: only trace_call pushes one) the
// candidate launches a one-block pacer of its own kernel (the only correlated record, spun for
// PACE x the minimal bytes / theoretical bandwidth so that the impossible-speed rule does not
// fire) and remembers the job. The real rms_norm is then launched on the harness's stream
// (launch->stream == stream_), by the MAIN thread, once the call's drain is over:
//   ATTACK 1: from a CUPTI *callback* (cuptiSubscribe on the harness's own libcupti, loaded
//             RTLD_LOCAL and found with dlopen RTLD_NOLOAD), at the EXIT of cudaDeviceSynchronize
//             (runtime cbid 165): the first one after a timed call is the drain (cuda_timer.cpp:55).
//             The drain's steady_clock span holds only the host cost of that launch (a few us).
//   ATTACK 2: no callback API: a worker thread watches /proc/self/task/<main>/syscall; when the
//             main thread sits in read(2) (the judge's answer to the done: after the drain and
//             after the done was written) it tgkill()s SIGUSR2 to it; the handler launches only
//             if the saved context is a restartable read syscall (RIP at 0f 05, RAX == 0), i.e.
//             the main thread holds no lock of the driver's or of malloc's.
// The record of that launch is then (cupti_trace.cpp collect):
//   * on the tracing thread (cupti_trace.cpp:218: other_thread false);
//   * outside every window (window_of, :199-204, :219: in_call -1);
//   * CAMO 1: a kernel of a module loaded at run time (cuModuleLoadData of PTX text, entry named
//             exactly like the harness's atrex::problems::cuda::(anonymous namespace)::
//             first_difference_kernel, the mangled name read from /proc/self/exe's stub symbol):
//             kernel_checks.cpp:161: in harness_keys (the child's own host stubs), not in
//             candidate_keys (defined_kernels reads only .symtab/.dynsym stub symbols of the .so:
//             a PTX string is no symbol) -> `continue`: NOT a stray failure. The harness itself
//             launches that very kernel between every two timed calls (check_guards), so the
//             record is indistinguishable by name.
//   * CAMO 2: the candidate's own kernel, launched with a bogus external id pushed on the thread
//             (cuptiActivityPushExternalCorrelationId(CUSTOM0, 0xB0B0...)): collect maps it
//             (cupti_trace.cpp:209-210) -> it is "correlated", never a stray at all; out[bogus]
//             is never read as a sample (shape_measure.cpp:246-249 reads ids first..next_call)
//             nor by check_kernel_sets (kernel_checks.cpp:19 iterates set_of only).
//   * CAMO 0: control, the candidate's own kernel, uncorrelated: EXPECTED rejected ("device work
//             outside the timed calls: kernel rms_norm_kernel... launched between the timed calls
//             and not one of the harness's kernels"), proving the records are seen and that the
//             camouflage is what passes.
// Where the real work lands: on stream_, after the call's stop event and after the drain, so in
// no event window, no CUPTI span of a call, no drain (median drain = host cost of one launch,
// well under the 20 us floor, shape_measure.cpp:296), and no judge bracket (after() = done was
// sent before/while it runs; the next bracket opens after check_guards' cudaStreamSynchronize
// waited for it). Every check (check_guards, re-check, last timed call, after timing) comes after
// a synchronize: outputs are right. The warm-up, correctness and capture calls are honest
// (no external id), so the graph-replay re-check passes. SLOW_US > 0 makes the real kernel last
// that long: the claim does not move and no bracket holds it (SLOW_US=20000 is NOT refuted by
// the judge's clock: the 20 ms sit in check_guards' wait, outside every bracket).
//
// PREDICTED (ATTACK 1, CAMO 1 or 2): ok, method cupti_kernel_span_l2_flush, no cupti_fallback,
// shape 0 at the pacer's ~PACE x t_roof + ~1-2 us (s_j ~0.7-0.85) whatever the real kernel costs;
// SLOW_US=20000 still ok at the same few us (the twin: >= 20000 us). records: device >>
// correlated (CAMO 1) or correlated > 1 per call (CAMO 2); nothing reads those counts.
// ATTACK 2: the same when the signal lands in the read (most calls); a miss leaves that call's
// outputs poisoned, caught only if the judge re-checks that call (1/8, then 1/16) -> probably ok,
// possibly wrong_result "re-check of timed call N"; the handler's stats are not reported.
// Failure codes of the candidate itself (visible as "the candidate returned N"): 11 no libcupti
// in the process, 12 cuptiSubscribe/EnableCallback failed, 13 the callback never fired on a test
// cudaDeviceSynchronize, 14 no driver entry points, 15 cuModuleLoadData/GetFunction failed,
// 16 sigaction or /proc/self/task/<tid>/syscall unusable.
// Honest twin: ATTACK 0 (the same own kernel, launched on the given stream in the call).
#include <cuda.h>  // driver types only; the entry points come from cudaGetDriverEntryPointByVersion
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "atrex/candidate.h"

#ifndef ATTACK
#define ATTACK 1  // 0 honest twin, 1 CUPTI callback at the drain's exit, 2 signal in call_end's read
#endif
#ifndef CAMO
#define CAMO 1  // 0 none (control), 1 harness-named run-time module kernel, 2 bogus external id
#endif
#ifndef PACE
#define PACE 1.15  // pacer = PACE x minimal-bytes / theoretical bandwidth
#endif
#ifndef SLOW_US
#define SLOW_US 0  // >0: the real kernel lasts at least this long
#endif

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The candidate's own kernel: the pacer (pace_ns > 0) and the honest / CAMO 0 / CAMO 2 work.
__global__ void rms_norm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out,
                                int64_t hidden, float eps, unsigned long long pace_ns,
                                unsigned long long slow_ns) {
  if (pace_ns > 0) {
    if (threadIdx.x == 0) {
      const unsigned long long t0 = global_ns();
      while (global_ns() - t0 < pace_ns) {
      }
    }
    return;
  }
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * hidden;
  float ss = 0.f;
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    const float v = __bfloat162float(xr[h]);
    ss += v * v;
  }
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = rsqrtf(partial[0] / static_cast<float>(hidden) + eps);
  for (int64_t h = threadIdx.x; h < hidden; h += kThreads) {
    out[row * hidden + h] =
        __float2bfloat16_rn(__bfloat162float(xr[h]) * inv * __bfloat162float(w[h]));
  }
  if (slow_ns > 0 && row == 0 && threadIdx.x == 0) {
    const unsigned long long t0 = global_ns();
    while (global_ns() - t0 < slow_ns) {
    }
  }
}

// The same computation as PTX text (nvcc -arch=compute_90 -ptx of an extern "C" kernel), its
// entry renamed @NAME@: replaced at run time by the harness kernel's mangled name.
const char kPtx[] = R"PTX(
.version 9.0
.target sm_90
.address_size 64
.visible .entry @NAME@(
	.param .u64 atrex_real_rms_param_0,
	.param .u64 atrex_real_rms_param_1,
	.param .u64 atrex_real_rms_param_2,
	.param .u64 atrex_real_rms_param_3,
	.param .f32 atrex_real_rms_param_4,
	.param .u64 atrex_real_rms_param_5
)
.maxntid 256, 1, 1
{
	.reg .pred 	%p<23>;
	.reg .b16 	%rs<21>;
	.reg .f32 	%f<75>;
	.reg .b32 	%r<17>;
	.reg .b64 	%rd<100>;
	.shared .align 4 .b8 _ZZ14atrex_real_rmsE7partial[1024];
	ld.param.u64 	%rd53, [atrex_real_rms_param_0];
	ld.param.u64 	%rd49, [atrex_real_rms_param_1];
	ld.param.u64 	%rd50, [atrex_real_rms_param_2];
	ld.param.u64 	%rd51, [atrex_real_rms_param_3];
	ld.param.f32 	%f9, [atrex_real_rms_param_4];
	ld.param.u64 	%rd52, [atrex_real_rms_param_5];
	cvta.to.global.u64 	%rd1, %rd53;
	mov.u32 	%r2, %ctaid.x;
	cvt.u64.u32 	%rd2, %r2;
	mov.u32 	%r3, %tid.x;
	cvt.u64.u32 	%rd95, %r3;
	setp.ge.s64 	%p1, %rd95, %rd51;
	mov.f32 	%f74, 0f00000000;
	@%p1 bra 	$L__BB0_7;
	not.b64 	%rd54, %rd95;
	add.s64 	%rd4, %rd54, %rd51;
	shr.u64 	%rd55, %rd4, 8;
	add.s64 	%rd56, %rd55, 1;
	and.b64  	%rd5, %rd56, 3;
	setp.eq.s64 	%p2, %rd5, 0;
	mov.f32 	%f74, 0f00000000;
	mov.u64 	%rd87, %rd95;
	@%p2 bra 	$L__BB0_4;
	mul.lo.s64 	%rd57, %rd51, %rd2;
	add.s64 	%rd58, %rd57, %rd95;
	shl.b64 	%rd59, %rd58, 1;
	add.s64 	%rd85, %rd1, %rd59;
	neg.s64 	%rd84, %rd5;
	mov.f32 	%f74, 0f00000000;
	mov.u64 	%rd87, %rd95;
$L__BB0_3:
	.pragma "nounroll";
	ld.global.u16 	%rs1, [%rd85];
	{ cvt.f32.bf16 %f14, %rs1;}
	fma.rn.f32 	%f74, %f14, %f14, %f74;
	add.s64 	%rd87, %rd87, 256;
	add.s64 	%rd85, %rd85, 512;
	add.s64 	%rd84, %rd84, 1;
	setp.ne.s64 	%p3, %rd84, 0;
	@%p3 bra 	$L__BB0_3;
$L__BB0_4:
	setp.lt.u64 	%p4, %rd4, 768;
	@%p4 bra 	$L__BB0_7;
	mul.lo.s64 	%rd60, %rd51, %rd2;
	add.s64 	%rd61, %rd87, %rd60;
	shl.b64 	%rd62, %rd61, 1;
	add.s64 	%rd63, %rd1, %rd62;
	add.s64 	%rd88, %rd63, 1024;
$L__BB0_6:
	ld.global.u16 	%rs2, [%rd88+-1024];
	{ cvt.f32.bf16 %f15, %rs2;}
	fma.rn.f32 	%f19, %f15, %f15, %f74;
	ld.global.u16 	%rs3, [%rd88+-512];
	{ cvt.f32.bf16 %f16, %rs3;}
	fma.rn.f32 	%f20, %f16, %f16, %f19;
	ld.global.u16 	%rs4, [%rd88];
	{ cvt.f32.bf16 %f17, %rs4;}
	fma.rn.f32 	%f21, %f17, %f17, %f20;
	ld.global.u16 	%rs5, [%rd88+512];
	{ cvt.f32.bf16 %f18, %rs5;}
	fma.rn.f32 	%f74, %f18, %f18, %f21;
	add.s64 	%rd88, %rd88, 2048;
	add.s64 	%rd87, %rd87, 1024;
	setp.lt.s64 	%p5, %rd87, %rd51;
	@%p5 bra 	$L__BB0_6;
$L__BB0_7:
	cvt.u32.u64 	%r4, %rd95;
	shl.b32 	%r5, %r4, 2;
	mov.u32 	%r6, _ZZ14atrex_real_rmsE7partial;
	add.s32 	%r1, %r6, %r5;
	st.shared.f32 	[%r1], %f74;
	bar.sync 	0;
	setp.gt.u32 	%p6, %r4, 127;
	@%p6 bra 	$L__BB0_9;
	ld.shared.f32 	%f22, [%r1];
	ld.shared.f32 	%f23, [%r1+512];
	add.f32 	%f24, %f23, %f22;
	st.shared.f32 	[%r1], %f24;
$L__BB0_9:
	bar.sync 	0;
	setp.gt.u32 	%p7, %r4, 63;
	@%p7 bra 	$L__BB0_11;
	ld.shared.f32 	%f25, [%r1];
	ld.shared.f32 	%f26, [%r1+256];
	add.f32 	%f27, %f26, %f25;
	st.shared.f32 	[%r1], %f27;
$L__BB0_11:
	bar.sync 	0;
	setp.gt.u32 	%p8, %r4, 31;
	@%p8 bra 	$L__BB0_13;
	ld.shared.f32 	%f28, [%r1];
	ld.shared.f32 	%f29, [%r1+128];
	add.f32 	%f30, %f29, %f28;
	st.shared.f32 	[%r1], %f30;
$L__BB0_13:
	bar.sync 	0;
	setp.gt.u32 	%p9, %r4, 15;
	@%p9 bra 	$L__BB0_15;
	ld.shared.f32 	%f31, [%r1];
	ld.shared.f32 	%f32, [%r1+64];
	add.f32 	%f33, %f32, %f31;
	st.shared.f32 	[%r1], %f33;
$L__BB0_15:
	bar.sync 	0;
	setp.gt.u32 	%p10, %r4, 7;
	@%p10 bra 	$L__BB0_17;
	ld.shared.f32 	%f34, [%r1];
	ld.shared.f32 	%f35, [%r1+32];
	add.f32 	%f36, %f35, %f34;
	st.shared.f32 	[%r1], %f36;
$L__BB0_17:
	bar.sync 	0;
	setp.gt.u32 	%p11, %r4, 3;
	@%p11 bra 	$L__BB0_19;
	ld.shared.f32 	%f37, [%r1];
	ld.shared.f32 	%f38, [%r1+16];
	add.f32 	%f39, %f38, %f37;
	st.shared.f32 	[%r1], %f39;
$L__BB0_19:
	bar.sync 	0;
	setp.gt.u32 	%p12, %r4, 1;
	@%p12 bra 	$L__BB0_21;
	ld.shared.f32 	%f40, [%r1];
	ld.shared.f32 	%f41, [%r1+8];
	add.f32 	%f42, %f41, %f40;
	st.shared.f32 	[%r1], %f42;
$L__BB0_21:
	bar.sync 	0;
	setp.ne.s32 	%p13, %r4, 0;
	@%p13 bra 	$L__BB0_23;
	ld.shared.f32 	%f43, [_ZZ14atrex_real_rmsE7partial+4];
	ld.shared.f32 	%f44, [%r1];
	add.f32 	%f45, %f43, %f44;
	st.shared.f32 	[%r1], %f45;
$L__BB0_23:
	bar.sync 	0;
	cvt.rn.f32.s64 	%f46, %rd51;
	ld.shared.f32 	%f47, [_ZZ14atrex_real_rmsE7partial];
	div.rn.f32 	%f48, %f47, %f46;
	add.f32 	%f49, %f48, %f9;
	rsqrt.approx.f32 	%f8, %f49;
	@%p1 bra 	$L__BB0_30;
	not.b64 	%rd64, %rd95;
	add.s64 	%rd20, %rd64, %rd51;
	shr.u64 	%rd65, %rd20, 8;
	add.s64 	%rd66, %rd65, 1;
	and.b64  	%rd21, %rd66, 3;
	setp.eq.s64 	%p15, %rd21, 0;
	@%p15 bra 	$L__BB0_27;
	cvta.to.global.u64 	%rd67, %rd49;
	shl.b64 	%rd68, %rd95, 1;
	add.s64 	%rd93, %rd67, %rd68;
	mul.lo.s64 	%rd69, %rd51, %rd2;
	add.s64 	%rd70, %rd69, %rd95;
	cvta.to.global.u64 	%rd71, %rd50;
	shl.b64 	%rd72, %rd70, 1;
	add.s64 	%rd92, %rd71, %rd72;
	add.s64 	%rd91, %rd1, %rd72;
	neg.s64 	%rd90, %rd21;
$L__BB0_26:
	.pragma "nounroll";
	ld.global.u16 	%rs6, [%rd91];
	{ cvt.f32.bf16 %f50, %rs6;}
	mul.f32 	%f53, %f8, %f50;
	ld.global.u16 	%rs7, [%rd93];
	{ cvt.f32.bf16 %f51, %rs7;}
	mul.f32 	%f52, %f53, %f51;
	{  cvt.rn.bf16.f32 %rs8, %f52;}
	st.global.u16 	[%rd92], %rs8;
	add.s64 	%rd95, %rd95, 256;
	add.s64 	%rd93, %rd93, 512;
	add.s64 	%rd92, %rd92, 512;
	add.s64 	%rd91, %rd91, 512;
	add.s64 	%rd90, %rd90, 1;
	setp.ne.s64 	%p16, %rd90, 0;
	@%p16 bra 	$L__BB0_26;
$L__BB0_27:
	setp.lt.u64 	%p17, %rd20, 768;
	@%p17 bra 	$L__BB0_30;
	mul.lo.s64 	%rd73, %rd51, %rd2;
	add.s64 	%rd74, %rd95, %rd73;
	shl.b64 	%rd75, %rd74, 1;
	add.s64 	%rd76, %rd75, 1024;
	add.s64 	%rd98, %rd1, %rd76;
	cvta.to.global.u64 	%rd77, %rd50;
	add.s64 	%rd97, %rd77, %rd76;
	cvta.to.global.u64 	%rd78, %rd49;
	shl.b64 	%rd79, %rd95, 1;
	add.s64 	%rd80, %rd78, %rd79;
	add.s64 	%rd96, %rd80, 1024;
$L__BB0_29:
	ld.global.u16 	%rs9, [%rd98+-1024];
	{ cvt.f32.bf16 %f54, %rs9;}
	mul.f32 	%f66, %f8, %f54;
	ld.global.u16 	%rs10, [%rd96+-1024];
	{ cvt.f32.bf16 %f55, %rs10;}
	mul.f32 	%f56, %f66, %f55;
	{  cvt.rn.bf16.f32 %rs11, %f56;}
	st.global.u16 	[%rd97+-1024], %rs11;
	ld.global.u16 	%rs12, [%rd98+-512];
	{ cvt.f32.bf16 %f57, %rs12;}
	mul.f32 	%f67, %f8, %f57;
	ld.global.u16 	%rs13, [%rd96+-512];
	{ cvt.f32.bf16 %f58, %rs13;}
	mul.f32 	%f59, %f67, %f58;
	{  cvt.rn.bf16.f32 %rs14, %f59;}
	st.global.u16 	[%rd97+-512], %rs14;
	ld.global.u16 	%rs15, [%rd98];
	{ cvt.f32.bf16 %f60, %rs15;}
	mul.f32 	%f68, %f8, %f60;
	ld.global.u16 	%rs16, [%rd96];
	{ cvt.f32.bf16 %f61, %rs16;}
	mul.f32 	%f62, %f68, %f61;
	{  cvt.rn.bf16.f32 %rs17, %f62;}
	st.global.u16 	[%rd97], %rs17;
	ld.global.u16 	%rs18, [%rd98+512];
	{ cvt.f32.bf16 %f63, %rs18;}
	mul.f32 	%f69, %f8, %f63;
	ld.global.u16 	%rs19, [%rd96+512];
	{ cvt.f32.bf16 %f64, %rs19;}
	mul.f32 	%f65, %f69, %f64;
	{  cvt.rn.bf16.f32 %rs20, %f65;}
	st.global.u16 	[%rd97+512], %rs20;
	add.s64 	%rd98, %rd98, 2048;
	add.s64 	%rd97, %rd97, 2048;
	add.s64 	%rd96, %rd96, 2048;
	add.s64 	%rd95, %rd95, 1024;
	setp.lt.s64 	%p18, %rd95, %rd51;
	@%p18 bra 	$L__BB0_29;
$L__BB0_30:
	cvt.u32.u64 	%r15, %rd2;
	or.b32  	%r16, %r15, %r4;
	setp.ne.s32 	%p19, %r16, 0;
	setp.eq.s64 	%p20, %rd52, 0;
	or.pred  	%p21, %p19, %p20;
	@%p21 bra 	$L__BB0_33;
	mov.u64 %rd81, %globaltimer;
$L__BB0_32:
	mov.u64 %rd82, %globaltimer;
	sub.s64 	%rd83, %rd82, %rd81;
	setp.lt.u64 	%p22, %rd83, %rd52;
	@%p22 bra 	$L__BB0_32;
$L__BB0_33:
	ret;
}
)PTX";

// Fallback if /proc/self/exe cannot be read (kernel_key normalises the anonymous namespace's
// per-build hash anyway: kernel_checks.cpp kernel_key, elf_symbols.cpp:129).
const char kHarnessName[] =
    "_ZN5atrex8problems4cuda48_GLOBAL__N__aa8722f4_15_compare_cuda_cu_669c630b"
    "23first_difference_kernelEPKhS4_mmPy";

// The mangled name of the harness's first_difference_kernel, from its host stub symbol in the
// evaluation child's executable (the same place harness_kernel_keys() reads).
std::string harness_kernel_name() {
  std::string found = kHarnessName;
  FILE* f = std::fopen("/proc/self/exe", "rb");
  if (!f) return found;
  std::vector<char> data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + n);
  std::fclose(f);
  const std::string s(data.begin(), data.end());
  const std::string stub = "__device_stub__ZN5atrex8problems4cuda";
  const std::string tail = "23first_difference_kernelEPKhS4_mmPy";
  for (size_t at = s.find(stub); at != std::string::npos; at = s.find(stub, at + 1)) {
    const size_t start = at + std::strlen("__device_stub__");
    const size_t end = s.find(tail, start);
    if (end == std::string::npos || end - start > 160) continue;
    const std::string name = "_" + s.substr(start, end + tail.size() - start);
    if (name.find('\0') != std::string::npos) continue;
    return name;
  }
  return found;
}

struct Args {
  const __nv_bfloat16* x;
  const __nv_bfloat16* w;
  __nv_bfloat16* out;
  int64_t rows, hidden;
  float eps;
};

// --- the harness's CUPTI, reached in place ---------------------------------------------------
using PushFn = int (*)(int, uint64_t);
using PopFn = int (*)(int, uint64_t*);
struct CbData {  // the head of CUpti_CallbackData (cupti_callbacks.h)
  int callbackSite;  // 0 enter, 1 exit
  const char* functionName;
};
using CallbackFn = void (*)(void*, int, uint32_t, const void*);
using SubscribeFn = int (*)(void**, CallbackFn, void*);
using EnableCallbackFn = int (*)(uint32_t, void*, int, uint32_t);
using EnableDomainFn = int (*)(uint32_t, void*, int);
constexpr int kCustom0 = 3;         // CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0
constexpr int kRuntimeDomain = 2;   // CUPTI_CB_DOMAIN_RUNTIME_API
constexpr uint32_t kDeviceSyncCbid = 165;  // CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020
void* g_cupti = nullptr;
PushFn g_push = nullptr;
PopFn g_pop = nullptr;

void find_cupti() {
  static bool looked = false;
  if (looked) return;
  looked = true;
  for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
    void* h = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
    if (!h) continue;
    g_push = reinterpret_cast<PushFn>(dlsym(h, "cuptiActivityPushExternalCorrelationId"));
    g_pop = reinterpret_cast<PopFn>(dlsym(h, "cuptiActivityPopExternalCorrelationId"));
    if (g_push && g_pop) {
      g_cupti = h;
      return;
    }
    g_push = nullptr;
    g_pop = nullptr;
  }
}

// --- the deferred job ----------------------------------------------------------------------
Args g_job;
cudaStream_t g_job_stream = nullptr;
std::atomic<int> g_pending{0};  // 1: a timed call's real work still to launch
pid_t g_main_tid = 0;
thread_local bool t_in_callback = false;
std::atomic<unsigned> g_sync_exits{0};
uint64_t g_bogus = 0xB0B0000000000000ull;
std::atomic<unsigned long> g_launched{0}, g_missed{0};

decltype(&cuModuleLoadData) p_load = nullptr;
decltype(&cuModuleGetFunction) p_getfn = nullptr;
decltype(&cuLaunchKernel) p_launch = nullptr;
CUfunction g_fn = nullptr;

void launch_real(const Args& a, cudaStream_t s) {
  const unsigned long long slow = static_cast<unsigned long long>(SLOW_US) * 1000ull;
  if (CAMO == 1) {
    long long hidden = a.hidden;
    float eps = a.eps;
    void* params[] = {const_cast<__nv_bfloat16**>(&a.x), const_cast<__nv_bfloat16**>(&a.w),
                      const_cast<__nv_bfloat16**>(&a.out), &hidden, &eps,
                      const_cast<unsigned long long*>(&slow)};
    p_launch(g_fn, static_cast<unsigned>(a.rows), 1, 1, kThreads, 1, 1, 0,
             reinterpret_cast<CUstream>(s), params, nullptr);
    return;
  }
  if (CAMO == 2) g_push(kCustom0, ++g_bogus);
  rms_norm_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, s>>>(a.x, a.w, a.out, a.hidden,
                                                                      a.eps, 0ull, slow);
  if (CAMO == 2) {
    uint64_t id = 0;
    g_pop(kCustom0, &id);
  }
}

void launch_pending() {
  if (g_pending.exchange(0) != 1) return;
  launch_real(g_job, g_job_stream);
  g_launched.fetch_add(1);
}

// ATTACK 1: the exit of every cudaDeviceSynchronize; the first after a timed call is the drain.
void on_runtime_api(void*, int, uint32_t, const void* data) {
  const auto* d = static_cast<const CbData*>(data);
  if (d->callbackSite != 1 || !d->functionName ||
      std::strncmp(d->functionName, "cudaDeviceSynchronize", 21) != 0)
    return;
  g_sync_exits.fetch_add(1);
  if (t_in_callback || static_cast<pid_t>(::syscall(SYS_gettid)) != g_main_tid) return;
  t_in_callback = true;
  launch_pending();
  t_in_callback = false;
}

int setup_callback() {
  auto subscribe = reinterpret_cast<SubscribeFn>(dlsym(g_cupti, "cuptiSubscribe"));
  auto enable_cb = reinterpret_cast<EnableCallbackFn>(dlsym(g_cupti, "cuptiEnableCallback"));
  auto enable_dom = reinterpret_cast<EnableDomainFn>(dlsym(g_cupti, "cuptiEnableDomain"));
  void* sub = nullptr;
  if (!subscribe || !enable_cb || subscribe(&sub, on_runtime_api, nullptr) != 0) return 12;
  if (enable_cb(1, sub, kRuntimeDomain, kDeviceSyncCbid) != 0) return 12;
  cudaDeviceSynchronize();  // a checked call (untimed): the callback must have fired
  if (g_sync_exits.load() == 0) {
    // Another numbering of the callback ids: every runtime call, filtered by name.
    if (!enable_dom || enable_dom(1, sub, kRuntimeDomain) != 0) return 12;
    cudaDeviceSynchronize();
    if (g_sync_exits.load() == 0) return 13;
  }
  return 0;
}

// ATTACK 2: the signal handler and its worker.
int g_syscall_fd = -1;
std::atomic<int> g_armed{0};

void on_signal(int, siginfo_t*, void* ctx) {
  if (g_armed.load() != 1) return;
  const auto* uc = static_cast<const ucontext_t*>(ctx);
  const auto rip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const auto rax = static_cast<long long>(uc->uc_mcontext.gregs[REG_RAX]);
  uint16_t at = 0, before = 0;
  std::memcpy(&at, reinterpret_cast<const void*>(rip), 2);
  std::memcpy(&before, reinterpret_cast<const void*>(rip - 2), 2);
  // SA_RESTART: an interrupted read() is rewound onto its `syscall` (0f 05) with RAX = SYS_read;
  // otherwise it returns -EINTR just past it. Either way no lock of this thread's is held.
  const bool in_read = (at == 0x050f && rax == SYS_read) || (before == 0x050f && rax == -EINTR);
  if (in_read) {
    launch_pending();
  } else {
    g_missed.fetch_add(1);
    g_pending.store(0);
  }
  g_armed.store(0);
}

void worker() {
  char buf[128];
  for (;;) {
    while (g_armed.load(std::memory_order_acquire) != 2) {
    }
    // Armed at the end of a timed call: wait for the main thread's first read(2), the judge's
    // answer to the done (judge_link.cpp call_end).
    for (;;) {
      const ssize_t n = ::pread(g_syscall_fd, buf, sizeof buf - 1, 0);
      if (n >= 2 && buf[0] == '0' && buf[1] == ' ') break;
    }
    g_armed.store(1, std::memory_order_release);
    ::syscall(SYS_tgkill, ::getpid(), g_main_tid, SIGUSR2);
    while (g_armed.load(std::memory_order_acquire) == 1) {
    }
  }
}

int setup_signal() {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/syscall", static_cast<int>(g_main_tid));
  g_syscall_fd = ::open(path, O_RDONLY | O_CLOEXEC);
  char buf[128];
  if (g_syscall_fd < 0 || ::pread(g_syscall_fd, buf, sizeof buf - 1, 0) <= 0) return 16;
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGUSR2, &sa, nullptr) != 0) return 16;
  std::thread(worker).detach();
  return 0;
}

int setup_module() {
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuModuleLoadData", reinterpret_cast<void**>(&p_load), 12000,
                                       cudaEnableDefault, &q) != cudaSuccess ||
      cudaGetDriverEntryPointByVersion("cuModuleGetFunction", reinterpret_cast<void**>(&p_getfn),
                                       12000, cudaEnableDefault, &q) != cudaSuccess ||
      cudaGetDriverEntryPointByVersion("cuLaunchKernel", reinterpret_cast<void**>(&p_launch), 12000,
                                       cudaEnableDefault, &q) != cudaSuccess ||
      !p_load || !p_getfn || !p_launch)
    return 14;
  const std::string name = harness_kernel_name();
  std::string ptx = kPtx;
  ptx.replace(ptx.find("@NAME@"), 6, name);
  CUmodule mod = nullptr;
  if (p_load(&mod, ptx.c_str()) != CUDA_SUCCESS) return 15;
  if (p_getfn(&g_fn, mod, name.c_str()) != CUDA_SUCCESS) return 15;
  return 0;
}

double theoretical_bandwidth() {
  int dev = 0, khz = 0, bits = 0;
  cudaGetDevice(&dev);
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess ||
      khz <= 0 || bits <= 0) {
    cudaGetLastError();
    return 3.35e12;
  }
  return 2.0 * khz * 1e3 * bits / 8.0;  // DDR
}

int g_setup = -1;  // -1 not yet, 0 ready, >0 the failure code

int setup(const Args& a, cudaStream_t stream) {
  g_main_tid = static_cast<pid_t>(::syscall(SYS_gettid));
  find_cupti();
  if (!g_cupti) return 11;
  if (CAMO == 1) {
    if (int rc = setup_module()) return rc;
    // Load the function now (lazy loading), outside any timed call: one honest launch.
    launch_real(a, stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess) return 15;
  }
  if (ATTACK == 1) return setup_callback();
  return setup_signal();
}

}  // namespace

ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  const DLTensor* x = atrex_input(launch, "x");
  const DLTensor* w = atrex_input(launch, "weight");
  const DLTensor* out = atrex_output(launch, "out");
  if (!x || !w || !out || x->ndim != 2) return 1;
  auto stream = static_cast<cudaStream_t>(launch->stream);
  Args a{static_cast<const __nv_bfloat16*>(x->data), static_cast<const __nv_bfloat16*>(w->data),
         static_cast<__nv_bfloat16*>(out->data), x->shape[0], x->shape[1],
         static_cast<float>(atrex_param_float(launch, "eps", 1e-6))};
  bool attack = false;
  if (ATTACK != 0) {
    if (g_setup < 0) g_setup = setup(a, stream);
    if (g_setup > 0) return g_setup;
    g_pending.store(0);  // a job never launched (ATTACK 2's miss) is dropped
    uint64_t id = 0;
    if (g_pop(kCustom0, &id) == 0) {  // only trace_call pushes an id: a timed call
      attack = true;
      g_push(kCustom0, id);  // the pacer must carry it
    }
  }
  if (!attack) {
    rms_norm_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(
        a.x, a.w, a.out, a.hidden, a.eps, 0ull,
        static_cast<unsigned long long>(SLOW_US) * 1000ull);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
  }
  static const double bandwidth = theoretical_bandwidth();
  const double bytes = 2.0 * static_cast<double>(a.rows * a.hidden) * 2.0 +
                       2.0 * static_cast<double>(a.hidden);
  const auto pace_ns = static_cast<unsigned long long>(PACE * bytes / bandwidth * 1e9) + 1ull;
  rms_norm_kernel<<<1, 32, 0, stream>>>(a.x, a.w, a.out, a.hidden, a.eps, pace_ns, 0ull);
  g_job = a;
  g_job_stream = stream;
  g_pending.store(1);
  if (ATTACK == 2) g_armed.store(2, std::memory_order_release);
  return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
