# Parse + validate atrex template headers; enumerate parameter combinations.
import itertools, re, sys, os, glob
ROOT = '/work/main/agent/templates'
def parse(path):
    lines = open(path).read().split('\n')
    name = desc = None; params = []
    for ln in lines:
        if not ln.startswith('//'): break
        m = re.match(r'// atrex-template: (\S+)$', ln)
        if m: name = m.group(1); continue
        m = re.match(r'// atrex-description: (.+)$', ln)
        if m: desc = m.group(1); continue
        m = re.match(r'// atrex-param: ([A-Z][A-Z0-9_]*) = (-?\d+) \| (.+)$', ln)
        if m:
            vals = [int(v.strip()) for v in m.group(3).split(',')]
            params.append((m.group(1), int(m.group(2)), vals)); continue
        raise SystemExit(f'{path}: bad header line {ln!r}')
    src = open(path).read()
    errs = []
    if name != os.path.splitext(os.path.basename(path))[0]: errs.append(f'name {name} != file name')
    if not desc: errs.append('no description')
    for n, dflt, vals in params:
        if dflt not in vals: errs.append(f'{n}: default not in values')
        if vals != sorted(set(vals)): errs.append(f'{n}: values not strictly increasing')
        if not re.search(rf'#ifndef {n}\n#define {n} {dflt}\n#endif', src): errs.append(f'{n}: guarded default missing/mismatch')
    if '#include "atrex/candidate.h"' not in src: errs.append('no candidate.h include')
    if 'ATREX_CANDIDATE_EXPORT int atrex_candidate_run(const AtrexLaunch* launch)' not in src: errs.append('no entry point')
    return name, desc, params, errs
def combos(params, full=True):
    if full:
        for vs in itertools.product(*[p[2] for p in params]):
            yield dict(zip([p[0] for p in params], vs))
    else:
        seen = set()
        base = {p[0]: p[1] for p in params}
        for n, d, vals in params:
            for v in vals:
                c = dict(base); c[n] = v
                k = tuple(sorted(c.items()))
                if k not in seen: seen.add(k); yield c
if __name__ == '__main__':
    bad = 0
    for f in sorted(glob.glob(ROOT + '/*/*/*')):
        name, desc, params, errs = parse(f)
        n = 1
        for p in params: n *= len(p[2])
        print(f'{os.path.relpath(f, ROOT)}: {name}; ' + '; '.join(f'{p[0]}={p[1]} {p[2]}' for p in params) + f'; combos={n}' + (f' ERRORS {errs}' if errs else ''))
        bad += bool(errs)
    sys.exit(1 if bad else 0)
