// The Python module pygpukit_torch._C. It has no Python functions of its own:
// importing it loads this library, whose static initializers register the
// pygpukit operators with the dispatcher (TORCH_LIBRARY / TORCH_LIBRARY_IMPL).
// Its one attribute, built_with_cuda, says whether the CUDA kernels were
// compiled in (setup.py defines PYGPUKIT_WITH_CUDA for such builds).
#include <Python.h>

extern "C" PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  PyObject* module = PyModule_Create(&module_def);
#ifdef PYGPUKIT_WITH_CUDA
  constexpr long kBuiltWithCuda = 1;
#else
  constexpr long kBuiltWithCuda = 0;
#endif
  if (module == nullptr) return nullptr;
  PyObject* flag = PyBool_FromLong(kBuiltWithCuda);
  // PyModule_AddObject takes the reference only when it succeeds.
  if (PyModule_AddObject(module, "built_with_cuda", flag) != 0) {
    Py_XDECREF(flag);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
