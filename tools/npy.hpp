// Reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0 read; 1.0 written), C order only.
//
// The conv3d-dx convention: '<f4' holds fp32, '<f2' fp16, '<u2' raw bf16 bits, '|u1' raw hifloat8 or
// float8_e4m3fn codes. Any file this module cannot use (missing, unreadable, malformed, unsupported) is
// reported as an NpyError; whether its contents fit the problem is the caller's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "conv3d_dx/conv3d_dx.hpp"

namespace conv3d_dx::npy {

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Array {
  std::string descr;                // '<f4', '<f2', '<u2' or '|u1'
  std::vector<std::int64_t> shape;  // C order
  std::vector<std::byte> data;      // little-endian elements, exactly elements() * item size bytes

  std::int64_t elements() const;
};

// The .npy descr that stores `dtype` under the conv3d-dx convention.
const char* descr_for(DType dtype);
// Bytes per element of one of the supported descrs (throws NpyError for others).
std::size_t item_size(const std::string& descr);

// Parse the header dictionary text, e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".
// Fills descr and shape; `what` names the file in error messages.
void parse_header(const std::string& header, const std::string& what, std::string& descr,
                  std::vector<std::int64_t>& shape);

Array read(const std::string& path);

// Serialise to the bytes of a version 1.0 file.
std::vector<std::byte> encode(const std::string& descr, const std::vector<std::int64_t>& shape,
                              const void* data, std::size_t bytes);

// Write a file in place (for tests and tools that do not need atomicity).
void write(const std::string& path, const std::string& descr, const std::vector<std::int64_t>& shape,
           const void* data, std::size_t bytes);

// Writes the output file. A regular file (or a new one) is written atomically: the constructor makes a short
// temporary file next to it (so an unwritable directory fails before any work is done), commit() writes the
// data and renames it into place, with the old file's mode and owner (the owner where the system allows it).
// If commit() is not reached or fails, or the process is stopped by SIGHUP, SIGINT, SIGQUIT, SIGTERM,
// SIGPIPE, SIGXCPU or SIGXFSZ meanwhile, the temporary file is removed and the file is left as it was.
// Symbolic links are followed: the file they name is replaced, not the link. An existing output that is not a
// regular file (a FIFO, a character device, /dev/stdout on a pipe or terminal) cannot be replaced: commit()
// writes into it in place. A directory is refused by the constructor.
class AtomicWriter {
 public:
  explicit AtomicWriter(std::string path);
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;

  void commit(const std::string& descr, const std::vector<std::int64_t>& shape, const void* data,
              std::size_t bytes);

 private:
  void discard() noexcept;

  std::string path_;    // as given, for messages
  std::string target_;  // the file written: path_ with symbolic links followed
  std::string temp_;    // the temporary file; empty in place or once renamed
  bool in_place_ = false;
  bool armed_ = false;  // the signal handlers remove temp_
  int fd_ = -1;
};

}  // namespace conv3d_dx::npy
