// gemmzoo.matmul's dispatch for torch tensors, compiled: the problem's key read from the tensors
// in C++, the plan found in a table, and plans that are torch.mm itself launched through at::mm.
//
// The Python dispatch (gemmzoo/dispatch/matmul.py) stays the authority: a problem met for the first time
// goes to its plan_of(), which makes and keeps the plan; this table only remembers, per problem,
// which plan that was. Its key holds everything the Python key holds (and a little more: both
// operands' types, dtypes, devices and exact strides), so it never finds a plan made for other
// operands. It is emptied when the current session's plan cache is another one than it was filled
// from (the answers were dropped, or another gemmzoo.Session is current).
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/mm.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <exception>
#include <unordered_map>

namespace {

constexpr size_t kMaxPlans = 4096;  // as gemmzoo.dispatch.plan_cache.PlanCache.MAX_PLANS
// Operands of up to this many dimensions are keyed here (2: a product; more: a batched one, whose
// plan is called as it is); others go to the Python dispatch.
constexpr int64_t kMaxDims = 4;

// What a problem is, as far as a plan is concerned.
struct Key {
  // The backend, accuracy and ranking arguments, by identity: an entry holds them, so no other
  // object takes their address while it lives. An equal object of another identity gets an
  // entry of its own, for the same plan.
  PyObject* backend;
  PyObject* accuracy;
  PyObject* by;
  PyTypeObject* type_a;
  PyTypeObject* type_b;
  std::array<int64_t, 4 * kMaxDims> extents;  // A's sizes and strides, then B's (unused: 0)
  int8_t dims_a, dims_b;
  int16_t dtype_a, dtype_b;
  int16_t device_type_a, device_type_b;
  int16_t device_index_a, device_index_b;
  bool grad_a, grad_b;

  bool operator==(const Key& other) const {
    return backend == other.backend && accuracy == other.accuracy && by == other.by &&
           type_a == other.type_a && type_b == other.type_b && dims_a == other.dims_a &&
           dims_b == other.dims_b && extents == other.extents &&
           dtype_a == other.dtype_a && dtype_b == other.dtype_b &&
           device_type_a == other.device_type_a && device_type_b == other.device_type_b &&
           device_index_a == other.device_index_a && device_index_b == other.device_index_b &&
           grad_a == other.grad_a && grad_b == other.grad_b;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = reinterpret_cast<uintptr_t>(k.type_a) ^ (reinterpret_cast<uintptr_t>(k.type_b) << 1) ^
                 (reinterpret_cast<uintptr_t>(k.backend) << 2) ^ (reinterpret_cast<uintptr_t>(k.accuracy) << 3) ^
                 (reinterpret_cast<uintptr_t>(k.by) << 4);
    for (int64_t x : k.extents) h = (h ^ static_cast<uint64_t>(x)) * 0x100000001b3ULL;
    uint64_t rest = static_cast<uint64_t>(k.dtype_a) | (static_cast<uint64_t>(k.dtype_b) << 8) |
                    (static_cast<uint64_t>(k.device_type_a) << 16) |
                    (static_cast<uint64_t>(k.device_type_b) << 24) |
                    (static_cast<uint64_t>(static_cast<uint16_t>(k.device_index_a)) << 32) |
                    (static_cast<uint64_t>(static_cast<uint16_t>(k.device_index_b)) << 48);
    h = (h ^ rest) * 0x100000001b3ULL;
    h = (h ^ (static_cast<uint64_t>(k.dims_a) | (static_cast<uint64_t>(k.dims_b) << 8))) * 0x100000001b3ULL;
    return static_cast<size_t>(h ^ (k.grad_a ? 0x9e37 : 0) ^ (k.grad_b ? 0x79b9 : 0));
  }
};

// How a plan is called. PYTHON: call it. MM: it is torch.mm. SWITCHED_MM: it is torch.mm with a
// precision switch at `wanted` while `lock` is held: read() gives the switch's value; write(),
// when there is one, sets it (and the switch is restored after the launch), else the plan is
// called whenever the switch reads otherwise. For TF32Array operands each "torch.mm" is of the
// wrapped tensors, and its result wrapped.
enum class Form { PYTHON, MM, SWITCHED_MM };

struct Entry {
  PyObject* arguments = nullptr;  // (backend, accuracy, by) of the key; strong references, all of them
  PyObject* plan = nullptr;
  Form form = Form::PYTHON;
  PyObject* acquire = nullptr;
  PyObject* release = nullptr;
  PyObject* read = nullptr;
  PyObject* write = nullptr;  // or None
  PyObject* wanted = nullptr;
  bool pair = false;

  void hold() const {
    for (PyObject* object : {arguments, plan, acquire, release, read, write, wanted}) Py_XINCREF(object);
  }
  void drop() const {
    for (PyObject* object : {arguments, plan, acquire, release, read, write, wanted}) Py_XDECREF(object);
  }
};

// Set once by configure(); strong references.
struct Config {
  PyObject* fallback = nullptr;  // the Python dispatch: (a, b, backend, accuracy, by) -> C
  PyObject* plan_of = nullptr;   // (a, b, backend, accuracy, by) -> (plan, form), or None: not kept
  PyObject* on_error = nullptr;  // (a, b, backend, accuracy, by) -> None, or raises what is wrong
  PyObject* session_var = nullptr;      // the ContextVar holding the current gemmzoo.Session
  PyObject* default_holder = nullptr;   // a list holding the default session once it is made
  PyObject* default_session = nullptr;  // () -> the default session, where neither holds one yet
  PyObject* plan_cache_name = nullptr;  // "plan_cache", the session's attribute
  PyTypeObject* tf32_type = nullptr;  // gemmzoo.TF32Array
  PyObject* data_name = nullptr;      // "data", its attribute
} config;

// The table and what it was filled under.
std::unordered_map<Key, Entry, KeyHash> plans;
PyObject* filled_for_cache = nullptr;  // strong

void clear_plans() {
  // Emptied before the references go: letting go of a plan can run Python code (a finalizer)
  // that calls gemmzoo.matmul, which must find a table it can use, not one being walked.
  std::unordered_map<Key, Entry, KeyHash> old;
  old.swap(plans);
  for (auto& item : old) item.second.drop();
}

// Empties the table when the current session's plan cache is not the one it was filled from
// (another session is current, or its answers were dropped). -1 on error.
int check_generation() {
  PyObject* session = nullptr;
  if (PyContextVar_Get(config.session_var, nullptr, &session) < 0) return -1;
  if (session == nullptr && PyList_GET_SIZE(config.default_holder) > 0) {
    session = PyList_GET_ITEM(config.default_holder, 0);
    Py_INCREF(session);
  }
  if (session == nullptr) {
    session = PyObject_CallNoArgs(config.default_session);
    if (session == nullptr) return -1;
  }
  PyObject* cache = PyObject_GetAttr(session, config.plan_cache_name);
  Py_DECREF(session);
  if (cache == nullptr) return -1;
  if (cache == filled_for_cache) {
    Py_DECREF(cache);
    return 0;
  }
  clear_plans();
  Py_XSETREF(filled_for_cache, cache);
  return 0;
}

Key key_of(PyObject* const* args, const at::Tensor& a, const at::Tensor& b) {
  PyObject* a_object = args[0];
  PyObject* b_object = args[1];
  Key key;
  key.backend = args[2];
  key.accuracy = args[3];
  key.by = args[4];
  key.type_a = Py_TYPE(a_object);
  key.type_b = Py_TYPE(b_object);
  key.extents.fill(0);
  size_t at = 0;
  for (const at::Tensor* operand : {&a, &b}) {
    auto sizes = operand->sizes(), strides = operand->strides();
    for (size_t d = 0; d < sizes.size(); ++d) {
      key.extents[at + 2 * d] = sizes[d];
      key.extents[at + 2 * d + 1] = strides[d];
    }
    at += 2 * kMaxDims;
  }
  key.dims_a = static_cast<int8_t>(a.dim());
  key.dims_b = static_cast<int8_t>(b.dim());
  key.dtype_a = static_cast<int16_t>(a.scalar_type());
  key.dtype_b = static_cast<int16_t>(b.scalar_type());
  key.device_type_a = static_cast<int16_t>(a.device().type());
  key.device_type_b = static_cast<int16_t>(b.device().type());
  key.device_index_a = a.device().index();
  key.device_index_b = b.device().index();
  key.grad_a = a.requires_grad();
  key.grad_b = b.requires_grad();
  return key;
}

// Reads the (plan, form) pair plan_of() returned. form: () for torch.mm itself, a
// gemmzoo.contract.backend.Switched (lock, read, write, wanted, pair) for torch.mm under a switch, None for
// any other plan.
bool entry_of(PyObject* answer, Entry* entry) {
  if (!PyTuple_Check(answer) || PyTuple_GET_SIZE(answer) != 2) {
    PyErr_SetString(PyExc_TypeError, "plan_of must return (plan, form)");
    return false;
  }
  PyObject* form = PyTuple_GET_ITEM(answer, 1);
  Entry found;
  found.plan = PyTuple_GET_ITEM(answer, 0);
  if (PyTuple_Check(form) && PyTuple_GET_SIZE(form) == 0) {
    found.form = Form::MM;
  } else if (PyTuple_Check(form) && PyTuple_GET_SIZE(form) == 5) {
    int pair = PyObject_IsTrue(PyTuple_GET_ITEM(form, 4));
    if (pair < 0) return false;
    PyObject* lock = PyTuple_GET_ITEM(form, 0);
    found.form = Form::SWITCHED_MM;
    found.read = PyTuple_GET_ITEM(form, 1);
    found.write = PyTuple_GET_ITEM(form, 2);
    found.wanted = PyTuple_GET_ITEM(form, 3);
    found.pair = pair == 1;
    found.acquire = PyObject_GetAttrString(lock, "acquire");  // new references: held as they are
    found.release = found.acquire ? PyObject_GetAttrString(lock, "release") : nullptr;
    if (found.release == nullptr) {
      Py_XDECREF(found.acquire);
      return false;
    }
  }
  for (PyObject* borrowed : {found.plan, found.read, found.write, found.wanted}) Py_XINCREF(borrowed);
  *entry = found;
  return true;
}

// at::mm(a, b), with the GIL let go while it launches, as torch.mm does.
PyObject* launch_mm(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor c;
  std::exception_ptr failure;
  Py_BEGIN_ALLOW_THREADS
  try {
    c = at::mm(a, b);
  } catch (...) {
    failure = std::current_exception();
  }
  Py_END_ALLOW_THREADS
  if (failure) {
    torch::translate_exception_to_python(failure);
    return nullptr;
  }
  return THPVariable_Wrap(std::move(c));
}

PyObject* call_plan(PyObject* plan, PyObject* const* args) {
  return PyObject_Vectorcall(plan, args, 2, nullptr);
}

// Runs `step` (a callable returning false on error) with the pending Python error, if any, put
// aside: when the step fails its error replaces the pending one, otherwise the pending one is
// restored. Returns what the step returned.
template <typename Step>
bool with_error_aside(Step step) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  if (!step()) {
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return false;
  }
  PyErr_Restore(type, value, traceback);
  return true;
}

// The switch's value: its raw reading (a new reference in *raw) and the part compared with
// `wanted` (borrowed from it). false on error.
bool read_switch(const Entry& entry, PyObject** raw, PyObject** value) {
  *raw = PyObject_CallNoArgs(entry.read);
  if (*raw == nullptr) return false;
  *value = *raw;
  if (entry.pair) {
    if (!PyTuple_Check(*raw) || PyTuple_GET_SIZE(*raw) != 2) {
      Py_CLEAR(*raw);
      PyErr_SetString(PyExc_TypeError, "a paired precision switch must read as a pair");
      return false;
    }
    *value = PyTuple_GET_ITEM(*raw, 0);
  }
  return true;
}

// write(wanted) or, for a pair, write(wanted, second half as read). false on error.
bool set_switch(const Entry& entry, PyObject* raw) {
  PyObject* set = entry.pair ? PyObject_CallFunctionObjArgs(entry.write, entry.wanted, PyTuple_GET_ITEM(raw, 1), nullptr)
                             : PyObject_CallOneArg(entry.write, entry.wanted);
  Py_XDECREF(set);
  return set != nullptr;
}

// write(raw) or, for a pair, write(*raw): the caller's value back. false on error.
bool restore_switch(const Entry& entry, PyObject* raw) {
  PyObject* set = entry.pair ? PyObject_Call(entry.write, raw, nullptr) : PyObject_CallOneArg(entry.write, raw);
  Py_XDECREF(set);
  return set != nullptr;
}

enum class Outcome { LAUNCHED, CALL_PLAN, FAILED };

// With the lock held: the product under the switch, or CALL_PLAN where the switch reads otherwise
// and cannot be written. *result holds the product when LAUNCHED.
Outcome launch_switched(const Entry& entry, const at::Tensor& a, const at::Tensor& b, PyObject** result) {
  PyObject *raw, *value;
  if (!read_switch(entry, &raw, &value)) return Outcome::FAILED;
  int same = PyObject_RichCompareBool(value, entry.wanted, Py_EQ);
  if (same < 0) {
    Py_DECREF(raw);
    return Outcome::FAILED;
  }
  if (same == 1) {
    Py_DECREF(raw);
    *result = launch_mm(a, b);
    return *result ? Outcome::LAUNCHED : Outcome::FAILED;
  }
  if (entry.write == Py_None) {
    Py_DECREF(raw);
    return Outcome::CALL_PLAN;
  }
  if (!set_switch(entry, raw)) {
    Py_DECREF(raw);
    return Outcome::FAILED;
  }
  *result = launch_mm(a, b);
  // the caller's value comes back whatever the launch did
  bool restored = with_error_aside([&] { return restore_switch(entry, raw); });
  Py_DECREF(raw);
  if (!restored) Py_CLEAR(*result);
  return *result ? Outcome::LAUNCHED : Outcome::FAILED;
}

PyObject* run(const Entry& entry, PyObject* const* args, const at::Tensor& a, const at::Tensor& b) {
  if (entry.form == Form::MM) return launch_mm(a, b);
  if (entry.form == Form::PYTHON) return call_plan(entry.plan, args);
  PyObject* held = PyObject_CallNoArgs(entry.acquire);
  if (held == nullptr) return nullptr;
  Py_DECREF(held);
  PyObject* result = nullptr;
  Outcome outcome = launch_switched(entry, a, b, &result);
  bool released = with_error_aside([&] {
    PyObject* done = PyObject_CallNoArgs(entry.release);
    Py_XDECREF(done);
    return done != nullptr;
  });
  if (!released) {
    Py_XDECREF(result);
    return nullptr;
  }
  if (outcome == Outcome::CALL_PLAN) return call_plan(entry.plan, args);  // it takes the lock itself
  return result;
}

// After a plan failed: on_error(a, b) raises the error that names what is wrong with the operands,
// if anything is; otherwise the plan's own error stands.
PyObject* failed(PyObject* const* args) {
  with_error_aside([&] {
    PyObject* checked = PyObject_Vectorcall(config.on_error, args, 5, nullptr);
    Py_XDECREF(checked);
    return checked != nullptr;
  });
  return nullptr;
}

// The tensors of a call: the operands themselves, or what two TF32Array operands wrap.
struct Operands {
  PyObject* a = nullptr;  // strong references
  PyObject* b = nullptr;
  bool tf32 = false;
  ~Operands() {
    Py_XDECREF(a);
    Py_XDECREF(b);
  }
};

// Fills `operands` when the call is one the table takes: plain tensors (or parameters), or
// TF32Array wrappers of them, with no torch function mode active. false otherwise (no error set)
// or on error (set).
bool operands_of(PyObject* const* args, Operands* operands) {
  PyObject* a = args[0];
  PyObject* b = args[1];
  if (Py_TYPE(a) == config.tf32_type && Py_TYPE(b) == config.tf32_type) {
    operands->tf32 = true;
    operands->a = PyObject_GetAttr(a, config.data_name);
    operands->b = operands->a ? PyObject_GetAttr(b, config.data_name) : nullptr;
    if (operands->b == nullptr) return false;
  } else {
    Py_INCREF(a);
    Py_INCREF(b);
    operands->a = a;
    operands->b = b;
  }
  return THPVariable_CheckExact(operands->a) && THPVariable_CheckExact(operands->b) &&
         !at::impl::torch_function_mode_enabled();
}

PyObject* dispatch(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "dispatch takes (a, b, backend, accuracy, by)");
    return nullptr;
  }
  if (config.fallback == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "gemmzoo's compiled dispatch is not configured");
    return nullptr;
  }
  Operands operands;
  if (!operands_of(args, &operands)) {
    if (PyErr_Occurred()) return nullptr;
    return PyObject_Vectorcall(config.fallback, args, 5, nullptr);
  }
  // Strong references, taken while the GIL is held: the first C++ reference to a tensor that a
  // Python object owns increfs that object, and one taken with the GIL let go (inside at::mm)
  // has to take the GIL back to do it.
  const at::Tensor a = THPVariable_Unpack(operands.a);
  const at::Tensor b = THPVariable_Unpack(operands.b);
  // 2-D, or batched (its plan is called as it is); others (1-D, more dimensions) through Python
  if (a.dim() < 2 || b.dim() < 2 || a.dim() > kMaxDims || b.dim() > kMaxDims) {
    return PyObject_Vectorcall(config.fallback, args, 5, nullptr);
  }
  if (check_generation() < 0) return nullptr;

  Key key = key_of(args, a, b);
  Entry entry;
  auto found = plans.find(key);
  if (found != plans.end()) {
    entry = found->second;
    entry.hold();  // the table may change while the plan runs (a plan can call gemmzoo.matmul)
  } else {
    PyObject* answer = PyObject_Vectorcall(config.plan_of, args, 5, nullptr);
    if (answer == nullptr) return nullptr;
    if (answer == Py_None) {  // a problem the Python dispatch does not keep a plan for
      Py_DECREF(answer);
      return PyObject_Vectorcall(config.fallback, args, 5, nullptr);
    }
    bool ok = entry_of(answer, &entry);
    Py_DECREF(answer);
    if (!ok) return nullptr;
    entry.arguments = PyTuple_Pack(3, args[2], args[3], args[4]);
    if (entry.arguments == nullptr) {
      entry.drop();
      return nullptr;
    }
    if (plans.size() >= kMaxPlans) clear_plans();
    entry.hold();
    auto placed = plans.emplace(key, entry);
    if (!placed.second) {  // met meanwhile, through a plan that called gemmzoo.matmul
      Entry replaced = placed.first->second;
      placed.first->second = entry;
      replaced.drop();  // after the table holds the new entry: this can run Python code
    }
  }
  PyObject* result = run(entry, args, a, b);
  entry.drop();
  if (result == nullptr) return failed(args);
  if (operands.tf32 && entry.form != Form::PYTHON && THPVariable_CheckExact(result)) {
    Py_SETREF(result, PyObject_CallOneArg(reinterpret_cast<PyObject*>(config.tf32_type), result));  // launched here: wrap it
    if (result == nullptr) return nullptr;
  }
  return result;
}

PyObject* configure(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7 || !PyContextVar_CheckExact(args[3]) || !PyList_CheckExact(args[4]) || !PyCallable_Check(args[5]) ||
      !PyType_Check(args[6])) {
    PyErr_SetString(PyExc_TypeError,
                    "configure takes (fallback, plan_of, on_error, session_var, default_holder, default_session, "
                    "tf32_type): session_var the ContextVar of the current session, default_holder the list "
                    "holding the default session, default_session a callable, tf32_type gemmzoo.TF32Array");
    return nullptr;
  }
  PyObject* name = PyUnicode_InternFromString("plan_cache");
  PyObject* data_name = name ? PyUnicode_InternFromString("data") : nullptr;
  if (data_name == nullptr) {
    Py_XDECREF(name);
    return nullptr;
  }
  Py_XSETREF(config.data_name, data_name);
  Py_INCREF(args[6]);
  Py_XSETREF(config.tf32_type, reinterpret_cast<PyTypeObject*>(args[6]));
  clear_plans();
  Py_CLEAR(filled_for_cache);
  Py_XSETREF(config.plan_cache_name, name);
  PyObject** slots[] = {&config.fallback, &config.plan_of, &config.on_error, &config.session_var,
                        &config.default_holder, &config.default_session};
  for (int i = 0; i < 6; ++i) {
    Py_INCREF(args[i]);
    Py_XSETREF(*slots[i], args[i]);
  }
  Py_RETURN_NONE;
}

PyObject* planned(PyObject* /*module*/, PyObject* /*unused*/) {
  return PyLong_FromSize_t(plans.size());
}

PyObject* forget(PyObject* /*module*/, PyObject* /*unused*/) {
  clear_plans();
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"dispatch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(dispatch)), METH_FASTCALL,
     "dispatch(a, b, backend, accuracy, by): gemmzoo.matmul's call on torch tensors."},
    {"configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(configure)), METH_FASTCALL,
     "configure(fallback, plan_of, on_error, session_var, default_holder, default_session, tf32_type)."},
    {"planned", planned, METH_NOARGS, "How many problems the table holds."},
    {"forget", forget, METH_NOARGS, "Empty the table."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, nullptr, "gemmzoo's compiled dispatch for torch tensors.",
                          -1, methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

#define GEMMZOO_CONCAT_(a, b) a##b
#define GEMMZOO_CONCAT(a, b) GEMMZOO_CONCAT_(a, b)
#define GEMMZOO_STRING_(a) #a
#define GEMMZOO_STRING(a) GEMMZOO_STRING_(a)

PyMODINIT_FUNC GEMMZOO_CONCAT(PyInit_, TORCH_EXTENSION_NAME)() {
  module_def.m_name = GEMMZOO_STRING(TORCH_EXTENSION_NAME);
  return PyModule_Create(&module_def);
}
