#pragma once
// The exceptions qfuse throws at its public boundary. Every message follows one
// template: "<action> <Op> node '<name>': <problem> (expected X, got Y)".

#include <stdexcept>
#include <string>

#include "qfuse/export.hpp"

namespace qfuse {

// Base of everything qfuse throws.
class QFUSE_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A graph is malformed: bad shapes, types, attributes or wiring.
class QFUSE_API GraphError : public Error {
 public:
  using Error::Error;
};

// A model uses an operator, attribute or type that qfuse does not implement.
class QFUSE_API UnsupportedError : public Error {
 public:
  using Error::Error;
};

// Building the execution plan failed (for example oneDNN refused a primitive).
class QFUSE_API CompileError : public Error {
 public:
  using Error::Error;
};

// Running an inference failed: missing or mismatched inputs, or a oneDNN error.
class QFUSE_API InferenceError : public Error {
 public:
  using Error::Error;
};

// A Tensor was made or read against its own shape or element type (values
// that do not fill the shape, a negative dimension, data<T>() of another
// type, an element index past the end).
class QFUSE_API TensorError : public Error {
 public:
  using Error::Error;
};

// Reading or writing a file failed.
class QFUSE_API IoError : public Error {
 public:
  using Error::Error;
};

}  // namespace qfuse
