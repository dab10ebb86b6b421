# On the GPU machine: build sampled combos of every CUDA template, run the correctness harness, then bench.
import sys, os, glob, subprocess, random, time, concurrent.futures as cf
HERE = os.path.dirname(os.path.abspath(__file__)); sys.path.insert(0, HERE)
import tmpl
tmpl.ROOT = os.path.abspath(os.path.join(HERE, '..'))
T0 = time.time(); DEADLINE = float(os.environ.get('DEADLINE', '540'))
OUTD = os.environ.get('OUT', '/tmp'); LOG = open(os.path.join(OUTD, 'gpu_log.txt'), 'w')
def log(*a):
    s = ' '.join(str(x) for x in a); print(s, flush=True); LOG.write(s + '\n'); LOG.flush()
SO = '/tmp/gso'; os.makedirs(SO, exist_ok=True)
INC = ['-I' + os.path.join(HERE, 'inc'), '-I' + os.path.abspath(os.path.join(HERE, '../../../runner/include'))]
NSAMPLE = int(os.environ.get('NSAMPLE', '40'))
only = os.environ.get('CORRECT', '').split(',') if os.environ.get('CORRECT') else []
BENCHSEL = os.environ.get('BENCHSEL', '').split(',')
def build(job):
    f, c, so = job
    cmd = ['nvcc', '-std=c++17', '-O3', '-arch=sm_90', '-shared', '-Xcompiler', '-fPIC'] + INC + [f'-D{k}={v}' for k, v in c.items()] + [f, '-o', so]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return job, r.returncode, r.stderr
files = sorted(glob.glob(tmpl.ROOT + '/*/cuda/*.cu'))
correct_files = [f for f in files if not only or any(a in f for a in only)]
files = [f for f in files if f in correct_files or any(a in f for a in BENCHSEL)]
plan = {}
alljobs = []
rnd = random.Random(7)
for f in files:
    name, desc, params, errs = tmpl.parse(f)
    op = f.split('/')[-3]
    each = list(tmpl.combos(params, full=False))
    full = list(tmpl.combos(params, full=True))
    if f not in correct_files: chosen = each
    elif len(full) <= 100: chosen = full
    else:
        keys = {tuple(sorted(c.items())) for c in each}
        rest = [c for c in full if tuple(sorted(c.items())) not in keys]
        chosen = each + rnd.sample(rest, NSAMPLE)
    jobs = [(f, c, f'{SO}/{op}__{name}__{i}.so') for i, c in enumerate(chosen)]
    plan[f] = (op, name, jobs, each)
    alljobs += jobs
log('building', len(alljobs), 'combos')
with cf.ThreadPoolExecutor(os.cpu_count()) as ex: res = list(ex.map(build, alljobs))
built = {}
for (f, c, so), rc, err in res:
    if rc: log('COMPILE FAIL', f, c, err[:1500])
    else: built[so] = c
log(f'built in {time.time()-T0:.0f}s')
for f, (op, name, jobs, each) in plan.items():
    if f not in correct_files: continue
    sos = [so for _, _, so in jobs if so in built]
    r = subprocess.run([os.path.join(HERE, 'harness_gpu'), op] + sos, capture_output=True, text=True)
    worst = 0; fails = 0
    for ln in r.stdout.splitlines():
        p = ln.split()
        if p[0] == 'OK':
            worst = max(worst, int(p[3]))
            if int(p[3]) > 1: log('  >1ulp', built.get(p[1]), ln)
        else: fails += 1; log('  ', ln, built.get(p[1]))
    if r.returncode not in (0, 1): log('  harness crashed rc', r.returncode, r.stderr[-2000:])
    log(f'{op}/cuda/{name}: {len(sos)} combos tested, rc={r.returncode}, failing lines={fails}, max_ulp={worst}')
BENCH = {'rms_norm': [[505888, 128], [3804, 7168]],
         'fused_add_rms_norm': [[24752, 1280], [3804, 7168], [126, 2048]],
         'silu_and_mul': [[175680, 1536], [15381, 8192]],
         'l2_norm': [[131072, 2048], [2304, 2048]],
         'moe_sum_reduce': [[11027, 8, 2048], [4195, 8, 2048]]}
for f, (op, name, jobs, each) in plan.items():
    if not any(a in f for a in BENCHSEL): continue
    for _, c, so in jobs:
        if c not in each or so not in built: continue
        for d in BENCH[op]:
            if time.time() - T0 > DEADLINE: log('deadline: bench stopped'); sys.exit(0)
            r = subprocess.run([os.path.join(HERE, 'harness_gpu'), 'bench', op, so] + [str(x) for x in d], capture_output=True, text=True)
            log(name, ' '.join(f'{k}={v}' for k, v in c.items()), r.stdout.strip().replace(so, ''), r.stderr.strip()[-300:])
