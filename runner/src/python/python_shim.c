/* The embedding layer of Python candidates (docs/python-candidates.md).
 *
 * A shared object the evaluation child loads after it has loaded the site's libpython with
 * RTLD_GLOBAL: compiled against CPython's stable ABI (Py_LIMITED_API 3.11) and NOT linked to
 * libpython, so one build serves any CPython >= 3.11 (Debian's 3.11 in CI, the GPU host's 3.12).
 * It exports the candidate ABI (atrex/candidate.h): to the child, a Python module is a candidate
 * like any compiled one, and every gate (seeds, poisoned outputs, guards, timing, CUPTI, the
 * judge) stays the child's C++ code.
 *
 * atrex_python_load(module, config_json): starts the interpreter (PYTHONHOME = the site's
 *   base_prefix, sys.path = the site's), imports torch, then the candidate's module from its
 *   file, and checks that it defines `class Model(torch.nn.Module)`. 0 on success; else the
 *   message (an exception's type, text and the candidate's frames) is kept for
 *   atrex_python_error().
 * atrex_candidate_run(launch): wraps every input and output DLTensor in a DLPack capsule (no
 *   copy; torch.utils.dlpack.from_dlpack takes capsules in torch 1.13 and 2.x), builds
 *   Model(**init_kwargs) (cached per distinct kwargs) and calls forward under torch.no_grad() on
 *   the launch's stream; the returned tensor / tuple / list / dict is mapped onto the operator's
 *   outputs and copied into atrex's (poisoned) output buffers on that stream. Non-zero on any
 *   Python exception or mismatch, with atrex_candidate_error_message() saying which.
 */
#define Py_LIMITED_API 0x030B0000
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atrex/candidate.h"

#define SHIM_EXPORT __attribute__((visibility("default")))

static char g_error[8192];
static PyObject* g_glue = NULL; /* the glue module's namespace (a dict) */

static void set_error(const char* text) {
  snprintf(g_error, sizeof g_error, "%s", text ? text : "(no message)");
}

/* The pending Python exception as text (str(type): str(value)), cleared. */
static void set_error_from_python(const char* what) {
  PyObject *type = NULL, *value = NULL, *tb = NULL;
  PyErr_Fetch(&type, &value, &tb);
  const char* tname = "exception";
  PyObject* tstr = type ? PyObject_Str(type) : NULL;
  PyObject* vstr = value ? PyObject_Str(value) : NULL;
  if (tstr) tname = PyUnicode_AsUTF8AndSize(tstr, NULL);
  const char* vtext = vstr ? PyUnicode_AsUTF8AndSize(vstr, NULL) : "";
  snprintf(g_error, sizeof g_error, "%s: %s: %s", what, tname ? tname : "exception",
           vtext ? vtext : "");
  Py_XDECREF(tstr);
  Py_XDECREF(vstr);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();
}

/* The glue: Python, run once in its own namespace. Errors come back as strings, so the C side
 * only ever sees glue bugs as exceptions. */
static const char kGlue[] =
    "import sys, os, json, traceback\n"
    "_state = {}\n"
    "def _format(e, path):\n"
    "    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == path]\n"
    "    where = ''.join(f'\\n  {os.path.basename(f.filename)} line {f.lineno}, in {f.name}: {f.line}'\n"
    "                    for f in frames[-4:])\n"
    "    return f'{type(e).__name__}: {e}{where}'\n"
    "def load(path, cfg_json):\n"
    "    cfg = json.loads(cfg_json)\n"
    "    sys.path[:] = [p for p in cfg['sys_path'] if p]\n"
    "    sys.dont_write_bytecode = True\n"
    "    if cfg.get('triton_cache_dir'):\n"
    "        os.environ['TRITON_CACHE_DIR'] = cfg['triton_cache_dir']\n"
    "    try:\n"
    "        import torch\n"
    "    except BaseException as e:\n"
    "        return f'importing torch from the site: {type(e).__name__}: {e}'\n"
    "    import importlib.util, inspect\n"
    "    _state['torch'] = torch\n"
    "    _state['path'] = path\n"
    "    try:\n"
    "        spec = importlib.util.spec_from_file_location('generated_kernel', path)\n"
    "        mod = importlib.util.module_from_spec(spec)\n"
    "        sys.modules['generated_kernel'] = mod\n"
    "        spec.loader.exec_module(mod)\n"
    "    except BaseException as e:\n"
    "        return 'importing the candidate module: ' + _format(e, path)\n"
    "    model = getattr(mod, 'Model', None)\n"
    "    if not (isinstance(model, type) and issubclass(model, torch.nn.Module)):\n"
    "        return 'the module defines no class Model(torch.nn.Module)'\n"
    "    _state['Model'] = model\n"
    "    names = []\n"
    "    for p in list(inspect.signature(model.__init__).parameters.values())[1:]:\n"
    "        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):\n"
    "            names.append(p.name)\n"
    "    _state['init_names'] = names\n"
    "    _state['models'] = {}\n"
    "    _state['streams'] = {}\n"
    "    return None\n"
    "def _structure(r):\n"
    "    if isinstance(r, dict): return 'a dict with keys ' + ', '.join(map(str, r.keys()))\n"
    "    if isinstance(r, (tuple, list)): return f'a {type(r).__name__} of {len(r)}'\n"
    "    return type(r).__name__\n"
    "def _map(r, out_names, inplace):\n"
    "    torch = _state['torch']\n"
    "    fresh = [i for i in range(len(out_names)) if i not in inplace]\n"
    "    if isinstance(r, dict):\n"
    "        missing = [n for n in out_names if n not in r and out_names.index(n) not in inplace]\n"
    "        extra = [k for k in r if k not in out_names]\n"
    "        if missing or extra:\n"
    "            raise ValueError(f'forward returned {_structure(r)}; the operator\\'s outputs are ' +\n"
    "                             ', '.join(out_names))\n"
    "        return {out_names.index(k): v for k, v in r.items()}\n"
    "    seq = list(r) if isinstance(r, (tuple, list)) else ([] if r is None else [r])\n"
    "    if len(seq) == len(out_names):\n"
    "        return dict(enumerate(seq))\n"
    "    if len(seq) == len(fresh):\n"
    "        return dict(zip(fresh, seq))\n"
    "    raise ValueError(f'forward returned {_structure(r)}; the operator has {len(out_names)} '\n"
    "                     f'output(s) ({\", \".join(out_names)})' +\n"
    "                     (f', {len(fresh)} not updated in place' if inplace else ''))\n"
    "def call(ins, outs, out_names, params, stream, inplace):\n"
    "    torch = _state['torch']\n"
    "    from torch.utils.dlpack import from_dlpack\n"
    "    try:\n"
    "        xi = [from_dlpack(c) for c in ins]\n"
    "        xo = [from_dlpack(c) for c in outs]\n"
    "    except BaseException as e:\n"
    "        return f'wrapping atrex\\'s tensors for torch (DLPack): {type(e).__name__}: {e}'\n"
    "    names = _state['init_names']\n"
    "    kwargs = {n: params[n] for n in names if n in params}\n"
    "    key = json.dumps(kwargs, sort_keys=True)\n"
    "    path = _state['path']\n"
    "    args = list(xi)\n"
    "    for o, i in inplace.items():\n"
    "        args[i] = xo[o]\n"
    "    try:\n"
    "        with torch.no_grad():\n"
    "            if stream:\n"
    "                s = _state['streams'].get(stream)\n"
    "                if s is None:\n"
    "                    s = _state['streams'][stream] = torch.cuda.ExternalStream(stream)\n"
    "                ctx = torch.cuda.stream(s)\n"
    "            else:\n"
    "                import contextlib\n"
    "                ctx = contextlib.nullcontext()\n"
    "            with ctx:\n"
    "                model = _state['models'].get(key)\n"
    "                if model is None:\n"
    "                    model = _state['models'][key] = _state['Model'](**kwargs)\n"
    "                r = model(*args)\n"
    "                mapped = _map(r, out_names, inplace)\n"
    "                for j, t in mapped.items():\n"
    "                    dst = xo[j]\n"
    "                    if not isinstance(t, torch.Tensor):\n"
    "                        return f'output {out_names[j]}: forward returned {type(t).__name__}, not a tensor'\n"
    "                    if tuple(t.shape) != tuple(dst.shape):\n"
    "                        return (f'output {out_names[j]}: shape {tuple(t.shape)}, the operator\\'s '\n"
    "                                f'is {tuple(dst.shape)}')\n"
    "                    if t.dtype != dst.dtype:\n"
    "                        return f'output {out_names[j]}: dtype {t.dtype}, the operator\\'s is {dst.dtype}'\n"
    "                    if t.device != dst.device:\n"
    "                        return f'output {out_names[j]}: on {t.device}, the operator\\'s is on {dst.device}'\n"
    "                    if t.data_ptr() != dst.data_ptr() or t.stride() != dst.stride():\n"
    "                        dst.copy_(t)\n"
    "    except BaseException as e:\n"
    "        return _format(e, path)\n"
    "    return None\n";

static int ensure_glue(void) {
  if (g_glue) return 0;
  PyObject* builtins = PyImport_ImportModule("builtins");
  if (!builtins) return -1;
  PyObject* exec = PyObject_GetAttrString(builtins, "exec");
  Py_DECREF(builtins);
  if (!exec) return -1;
  PyObject* ns = PyDict_New();
  PyObject* code = PyUnicode_FromString(kGlue);
  PyObject* r = (ns && code) ? PyObject_CallFunctionObjArgs(exec, code, ns, NULL) : NULL;
  Py_XDECREF(code);
  Py_DECREF(exec);
  if (!r) {
    Py_XDECREF(ns);
    return -1;
  }
  Py_DECREF(r);
  g_glue = ns;
  return 0;
}

/* Calls glue function `name` with `args` (stolen). Returns 0 when it returned None; else the
 * returned string (or the exception) is in g_error. */
static int call_glue(const char* name, PyObject* args, const char* what) {
  if (!args) {
    set_error_from_python(what);
    return 1;
  }
  PyObject* fn = PyDict_GetItemString(g_glue, name); /* borrowed */
  PyObject* r = fn ? PyObject_CallObject(fn, args) : NULL;
  Py_DECREF(args);
  if (!r) {
    set_error_from_python(what);
    return 1;
  }
  int rc = 0;
  if (r != Py_None) {
    PyObject* s = PyObject_Str(r);
    set_error(s ? PyUnicode_AsUTF8AndSize(s, NULL) : "(unprintable error)");
    Py_XDECREF(s);
    rc = 1;
  }
  Py_DECREF(r);
  return rc;
}

SHIM_EXPORT int atrex_python_load(const char* module_path, const char* config_json,
                                  const char* python_home) {
  if (!Py_IsInitialized()) {
    if (python_home && *python_home) setenv("PYTHONHOME", python_home, 1);
    setenv("PYTHONNOUSERSITE", "1", 1);
    setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
    Py_InitializeEx(0); /* no signal handlers: the child's stay */
    if (!Py_IsInitialized()) {
      set_error("the site's Python did not start");
      return 1;
    }
    PyEval_SaveThread(); /* release the GIL; every entry takes it */
  }
  PyGILState_STATE g = PyGILState_Ensure();
  int rc = 0;
  if (ensure_glue() != 0) {
    set_error_from_python("atrex's Python glue");
    rc = 1;
  } else {
    rc = call_glue("load", Py_BuildValue("(ss)", module_path, config_json), "loading");
  }
  PyGILState_Release(g);
  return rc;
}

SHIM_EXPORT const char* atrex_python_error(void) { return g_error; }

/* ---- DLPack capsules over atrex's buffers (no copy) ---------------------------------------- */

typedef struct Wrapped {
  DLManagedTensor managed;
  int64_t shape[8];
} Wrapped;

static void wrapped_deleter(DLManagedTensor* self) { free(self); }

/* A capsule torch has not consumed still owns its tensor. */
static void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    DLManagedTensor* m = (DLManagedTensor*)PyCapsule_GetPointer(capsule, "dltensor");
    if (m && m->deleter) m->deleter(m);
  }
}

static PyObject* make_capsule(const DLTensor* t) {
  if (t->ndim > 8) {
    PyErr_SetString(PyExc_ValueError, "a tensor of more than 8 dimensions");
    return NULL;
  }
  Wrapped* w = (Wrapped*)calloc(1, sizeof(Wrapped));
  if (!w) return PyErr_NoMemory();
  w->managed.dl_tensor = *t;
  for (int i = 0; i < t->ndim; ++i) w->shape[i] = t->shape[i];
  w->managed.dl_tensor.shape = w->shape;
  w->managed.dl_tensor.strides = NULL; /* atrex's tensors are contiguous */
  w->managed.manager_ctx = NULL;
  w->managed.deleter = wrapped_deleter;
  PyObject* c = PyCapsule_New(&w->managed, "dltensor", capsule_destructor);
  if (!c) free(w);
  return c;
}

static PyObject* param_value(const AtrexParam* p) {
  switch (p->kind) {
    case ATREX_PARAM_INT: return PyLong_FromLongLong(p->int_value);
    case ATREX_PARAM_FLOAT: return PyFloat_FromDouble(p->float_value);
    case ATREX_PARAM_BOOL: return PyBool_FromLong(p->int_value != 0);
    case ATREX_PARAM_STRING: return PyUnicode_FromString(p->string_value ? p->string_value : "");
    case ATREX_PARAM_INT_LIST: {
      PyObject* l = PyList_New((Py_ssize_t)p->int_list_length);
      if (!l) return NULL;
      for (int64_t i = 0; i < p->int_list_length; ++i)
        PyList_SetItem(l, (Py_ssize_t)i, PyLong_FromLongLong(p->int_list[i]));
      return l;
    }
    default: Py_RETURN_NONE;
  }
}

/* In-place outputs: output index -> the input index it stands in for (set by the child for
 * outputs that start as an input's values: TensorSpec::initial_from). */
static int g_inplace[16][2];
static int g_num_inplace = 0;

SHIM_EXPORT void atrex_python_set_inplace(const int* output_index, const int* input_index,
                                          int n) {
  g_num_inplace = n > 16 ? 16 : n;
  for (int i = 0; i < g_num_inplace; ++i) {
    g_inplace[i][0] = output_index[i];
    g_inplace[i][1] = input_index[i];
  }
}

static PyObject* build_args(const AtrexLaunch* l) {
  PyObject* ins = PyList_New(l->num_inputs);
  PyObject* outs = PyList_New(l->num_outputs);
  PyObject* names = PyList_New(l->num_outputs);
  PyObject* params = PyDict_New();
  PyObject* inplace = PyDict_New();
  if (!ins || !outs || !names || !params || !inplace) goto fail;
  for (int i = 0; i < l->num_inputs; ++i) {
    PyObject* c = make_capsule(&l->inputs[i].tensor);
    if (!c) goto fail;
    PyList_SetItem(ins, i, c);
  }
  for (int i = 0; i < l->num_outputs; ++i) {
    PyObject* c = make_capsule(&l->outputs[i].tensor);
    if (!c) goto fail;
    PyList_SetItem(outs, i, c);
    PyList_SetItem(names, i, PyUnicode_FromString(l->outputs[i].name));
  }
  for (int i = 0; i < l->num_params; ++i) {
    PyObject* v = param_value(&l->params[i]);
    if (!v || PyDict_SetItemString(params, l->params[i].name, v) != 0) {
      Py_XDECREF(v);
      goto fail;
    }
    Py_DECREF(v);
  }
  for (int i = 0; i < g_num_inplace; ++i) {
    PyObject* k = PyLong_FromLong(g_inplace[i][0]);
    PyObject* v = PyLong_FromLong(g_inplace[i][1]);
    if (!k || !v || PyDict_SetItem(inplace, k, v) != 0) {
      Py_XDECREF(k);
      Py_XDECREF(v);
      goto fail;
    }
    Py_DECREF(k);
    Py_DECREF(v);
  }
  {
    PyObject* stream = PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)l->stream);
    if (!stream) goto fail;
    return Py_BuildValue("(NNNNNN)", ins, outs, names, params, stream, inplace);
  }
fail:
  Py_XDECREF(ins);
  Py_XDECREF(outs);
  Py_XDECREF(names);
  Py_XDECREF(params);
  Py_XDECREF(inplace);
  return NULL;
}

SHIM_EXPORT int atrex_candidate_run(const AtrexLaunch* launch) {
  if (!g_glue) {
    set_error("the Python candidate was not loaded");
    return 1;
  }
  PyGILState_STATE g = PyGILState_Ensure();
  const int rc = call_glue("call", build_args(launch), "calling the candidate");
  PyGILState_Release(g);
  return rc;
}

SHIM_EXPORT const char* atrex_candidate_error_message(void) { return g_error; }
