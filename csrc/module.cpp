// The Python module pygpukit_torch._C. It has no Python functions of its own:
// importing it loads this library, whose static initializers register the
// pygpukit operators with the dispatcher (TORCH_LIBRARY / TORCH_LIBRARY_IMPL).
#include <Python.h>

extern "C" PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
