// The Python exception classes of tensoracle (one per C++ error class) and the translator from C++ to Python.
#include <exception>

#include "bindings.hpp"
#include "tensoracle/bundle.hpp"
#include "tensoracle/cache.hpp"
#include "tensoracle/error.hpp"
#include "tensoracle/network.hpp"

namespace tensoracle::python {
namespace {

struct PythonErrors {
  PyObject* error = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* not_found = nullptr;
  PyObject* io = nullptr;
  PyObject* format = nullptr;
  PyObject* unsupported = nullptr;
  PyObject* cuda = nullptr;
  PyObject* graph = nullptr;
  PyObject* engine_cache = nullptr;
  PyObject* corrupt_engine = nullptr;
  PyObject* engine_condition = nullptr;
  PyObject* engine_io = nullptr;
  PyObject* bundle = nullptr;
  PyObject* cubin_architecture = nullptr;
};

PythonErrors errors;  // the classes live as long as the interpreter (module attributes hold them too)

// A class named tensoracle.<name> deriving from every class of `bases`, added to the module.
PyObject* make_error(nb::module_& m, const char* name, const char* doc, std::initializer_list<PyObject*> bases) {
  nb::tuple base_tuple = nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(bases.size())));
  Py_ssize_t i = 0;
  for (PyObject* base : bases) {
    Py_INCREF(base);
    PyTuple_SET_ITEM(base_tuple.ptr(), i++, base);
  }
  const std::string qualified = std::string("tensoracle.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base_tuple.ptr(), nullptr);
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::borrow(type);
  return type;
}

void set_error(PyObject* type, const std::exception& e) { PyErr_SetString(type, e.what()); }

}  // namespace

void bind_errors(nb::module_& m) {
  errors.error = make_error(m, "Error", "Base class of every error tensoracle raises (C++ tensoracle::Error).",
                            {PyExc_RuntimeError});
  errors.invalid_argument = make_error(m, "InvalidArgumentError",
                                       "A value the API cannot accept: a bad shape, an unknown name, an out-of-range "
                                       "option.",
                                       {errors.error, PyExc_ValueError});
  errors.not_found =
      make_error(m, "NotFoundError", "A name that was asked for does not exist (tensor, input, file entry).",
                 {errors.error, PyExc_LookupError});
  errors.io =
      make_error(m, "IoError", "The operating system refused a file operation (open, read, write, rename, mmap).",
                 {errors.error, PyExc_OSError});
  errors.format = make_error(m, "FormatError",
                             "A file's contents are invalid (safetensors, engine, .npy): damaged, truncated or of "
                             "another format.",
                             {errors.error, PyExc_ValueError});
  errors.unsupported =
      make_error(m, "UnsupportedError", "A valid request that this build or this machine does not support.",
                 {errors.error, PyExc_NotImplementedError});
  errors.cuda = make_error(m, "CudaError", "A CUDA runtime, driver or library call failed; the message names the call.",
                           {errors.error});
  errors.graph = make_error(m, "GraphError",
                            "An invalid network: the message names the layer and the tensor and says what is wrong.",
                            {errors.error, PyExc_ValueError});
  errors.engine_cache = make_error(m, "EngineCacheError",
                                   "A stored engine cannot be used for this declaration (a ValueError, as in the "
                                   "reference). Rebuild with force_rebuild=True or delete the file.",
                                   {errors.error, PyExc_ValueError});
  errors.corrupt_engine =
      make_error(m, "CorruptEngineError", "A stored engine is incomplete or corrupt.", {errors.engine_cache});
  errors.engine_condition = make_error(m, "EngineConditionError",
                                       "A stored engine belongs to different build conditions.", {errors.engine_cache});
  errors.engine_io =
      make_error(m, "EngineIOError", "The engine's input or output signature differs from the declaration.",
                 {errors.engine_cache});
  errors.bundle = make_error(m, "BundleError",
                             "A cubin bundle, kernel spec or cubin is invalid, or a bundle check failed (digest, path, "
                             "parameter ABI, scratch); the message names the file and the kernel.",
                             {errors.error, PyExc_ValueError});
  errors.cubin_architecture = make_error(m, "CubinArchitectureError",
                                         "A cubin's architecture is wrong, unknown or not allowed.", {errors.bundle});

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const CorruptEngineError& e) {
      set_error(errors.corrupt_engine, e);
    } catch (const EngineConditionError& e) {
      set_error(errors.engine_condition, e);
    } catch (const EngineIOError& e) {
      set_error(errors.engine_io, e);
    } catch (const EngineCacheError& e) {
      set_error(errors.engine_cache, e);
    } catch (const CubinArchitectureError& e) {
      set_error(errors.cubin_architecture, e);
    } catch (const BundleError& e) {
      set_error(errors.bundle, e);
    } catch (const GraphError& e) {
      set_error(errors.graph, e);
    } catch (const InvalidArgumentError& e) {
      set_error(errors.invalid_argument, e);
    } catch (const NotFoundError& e) {
      set_error(errors.not_found, e);
    } catch (const IoError& e) {
      set_error(errors.io, e);
    } catch (const FormatError& e) {
      set_error(errors.format, e);
    } catch (const UnsupportedError& e) {
      set_error(errors.unsupported, e);
    } catch (const CudaError& e) {
      set_error(errors.cuda, e);
    } catch (const Error& e) {
      set_error(errors.error, e);
    }
  });
}

}  // namespace tensoracle::python
