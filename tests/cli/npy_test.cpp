// The .npy reader and writer: round trips, other format versions, and every malformed file it must reject.
#include "npy.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "support.hpp"

namespace conv3d_dx::cli::testing {
namespace {

std::string f32_bytes(std::initializer_list<float> values) {
  std::string s(values.size() * 4, '\0');
  std::size_t i = 0;
  for (const float v : values) std::memcpy(s.data() + 4 * i++, &v, 4);
  return s;
}

// Reads a file made of `bytes` and returns the NpyError message ("" when it was read).
std::string read_error(const TempDir& dir, const std::string& bytes) {
  write_file(dir.file("x.npy"), bytes);
  try {
    npy::read(dir.file("x.npy"));
  } catch (const npy::NpyError& e) {
    return e.what();
  }
  return "";
}

TEST(Npy, RoundTripsEveryDescrAndShape) {
  TempDir dir;
  const std::vector<std::vector<std::int64_t>> shapes = {
      {}, {5}, {2, 3}, {2, 1, 3, 4, 2}, {0, 3}, {1, 0, 2, 2, 2}};
  for (const char* descr : {"<f4", "<f2", "<u2", "|u1"}) {
    for (const auto& shape : shapes) {
      std::int64_t n = 1;
      for (const auto d : shape) n *= d;
      const std::size_t bytes = static_cast<std::size_t>(n) * npy::item_size(descr);
      std::vector<unsigned char> data(bytes);
      for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 37 + 11);
      npy::write(dir.file("a.npy"), descr, shape, data.data(), bytes);
      const std::string file = read_file(dir.file("a.npy"));
      ASSERT_EQ(file.size() % 64, bytes % 64) << "data must start at a multiple of 64 bytes";
      ASSERT_EQ(file.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
      const npy::Array a = npy::read(dir.file("a.npy"));
      EXPECT_EQ(a.descr, descr);
      EXPECT_EQ(a.shape, shape);
      ASSERT_EQ(a.data.size(), bytes);
      EXPECT_TRUE(bytes == 0 || std::memcmp(a.data.data(), data.data(), bytes) == 0);
    }
  }
}

TEST(Npy, WritesTheHeaderNumpyExpects) {
  const float v[2] = {1.5f, -2.0f};
  const std::vector<std::byte> file = npy::encode("<f4", {2}, v, sizeof v);
  const std::string s(reinterpret_cast<const char*>(file.data()), file.size());
  EXPECT_NE(s.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"), std::string::npos) << s;
  EXPECT_EQ(s[s.size() - sizeof v - 1], '\n');
  EXPECT_EQ((s.size() - sizeof v) % 64, 0u);
}

TEST(Npy, ReadsFormatVersions2And3AndOtherSpellings) {
  TempDir dir;
  const std::string data = f32_bytes({1, 2, 3, 4, 5, 6});
  for (int major : {1, 2, 3}) {
    for (const std::string dict : {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                   "{\"shape\":(2,3),\"fortran_order\":False,\"descr\":\"<f4\"}",
                                   "{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3)}"}) {
      write_file(dir.file("v.npy"), npy_bytes(major, dict, data));
      const npy::Array a = npy::read(dir.file("v.npy"));
      EXPECT_EQ(a.descr, "<f4") << major << " " << dict;
      EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
      float back[6];
      std::memcpy(back, a.data.data(), sizeof back);
      EXPECT_EQ(back[5], 6.0f);
    }
  }
  write_file(dir.file("u.npy"),
             npy_bytes(1, "{'descr': '<u1', 'fortran_order': False, 'shape': (3,), }", "abc"));
  EXPECT_EQ(npy::read(dir.file("u.npy")).descr, "|u1");
}

TEST(Npy, RejectsMalformedFilesWithClearMessages) {
  TempDir dir;
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::string data = f32_bytes({1, 2, 3, 4, 5, 6});
  const std::string good = npy_bytes(1, good_dict, data);
  ASSERT_EQ(read_error(dir, good), "");

  struct Bad {
    std::string name, bytes, expect;
  };
  std::string bad_magic = good;
  bad_magic[1] = 'X';
  std::string version4 = good;
  version4[6] = 4;
  std::string minor1 = good;
  minor1[7] = 1;
  const std::vector<Bad> cases = {
      {"empty file", "", "bad magic"},
      {"bad magic", bad_magic, "bad magic"},
      {"text file", "hello, world\n", "bad magic"},
      {"version 4.0", version4, "version 4.0"},
      {"version 1.1", minor1, "version 1.1"},
      {"truncated header length", good.substr(0, 9), "truncated header"},
      {"truncated header", good.substr(0, 40), "truncated header"},
      {"truncated data", good.substr(0, good.size() - 3), "truncated data"},
      {"no data", good.substr(0, good.size() - data.size()), "truncated data"},
      {"trailing data", good + "xyz", "unexpected bytes"},
      {"fortran order", npy_bytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data),
       "Fortran-order"},
      {"big-endian", npy_bytes(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", data),
       "big-endian"},
      {"big-endian u2", npy_bytes(1, "{'descr': '>u2', 'fortran_order': False, 'shape': (3,), }", "abcdef"),
       "big-endian"},
      {"float64", npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", data), "'<f8'"},
      {"int32", npy_bytes(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", data), "'<i4'"},
      {"structured", npy_bytes(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", data),
       "structured"},
      {"missing shape", npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, }", data), "lacks"},
      {"unknown key", npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1, }", data),
       "unexpected key 'x'"},
      {"duplicate key",
       npy_bytes(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", data),
       "duplicate key"},
      {"negative dim", npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }", data),
       "non-negative integer"},
      {"huge dim",
       npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", data),
       "too large"},
      {"product overflow",
       npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", data),
       "too large"},
      {"not a dict", npy_bytes(1, "['descr', '<f4']", data), "malformed"},
      {"unterminated", npy_bytes(1, "{'descr': '<f4, 'fortran_order': False", data), "malformed"},
      {"fortran_order not bool", npy_bytes(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (6,), }", data),
       "True or False"},
  };
  for (const Bad& b : cases) {
    const std::string msg = read_error(dir, b.bytes);
    EXPECT_NE(msg.find(b.expect), std::string::npos) << b.name << ": got '" << msg << "'";
    EXPECT_NE(msg.find("x.npy"), std::string::npos) << b.name << ": the message must name the file: " << msg;
  }
}

TEST(Npy, MissingFileAndDirectoryAreErrors) {
  TempDir dir;
  EXPECT_THROW(npy::read(dir.file("missing.npy")), npy::NpyError);
  EXPECT_THROW(npy::read(dir.path()), npy::NpyError);
}

TEST(Npy, AtomicWriterLeavesNothingBehindUnlessCommitted) {
  TempDir dir;
  const float v[3] = {1, 2, 3};
  { npy::AtomicWriter w(dir.file("y.npy")); }
  EXPECT_TRUE(dir.entries().empty());

  write_file(dir.file("y.npy"), "old");
  { npy::AtomicWriter w(dir.file("y.npy")); }
  EXPECT_EQ(read_file(dir.file("y.npy")), "old") << "an abandoned write must leave the old file alone";

  {
    npy::AtomicWriter w(dir.file("y.npy"));
    w.commit("<f4", {3}, v, sizeof v);
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"y.npy"});
  EXPECT_EQ(npy::read(dir.file("y.npy")).shape, std::vector<std::int64_t>{3});

  EXPECT_THROW(npy::AtomicWriter(dir.file("no/such/dir/y.npy")), npy::NpyError);
  // A directory is refused before anything is created.
  std::filesystem::create_directory(dir.file("sub"));
  EXPECT_THROW(npy::AtomicWriter(dir.file("sub")), npy::NpyError);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"sub", "y.npy"}));
  // Renaming fails at commit (the target became a directory meanwhile): the temporary file is removed.
  {
    npy::AtomicWriter w(dir.file("late"));
    std::filesystem::create_directory(dir.file("late"));
    EXPECT_THROW(w.commit("<f4", {3}, v, sizeof v), npy::NpyError);
  }
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"late", "sub", "y.npy"}));
}

}  // namespace
}  // namespace conv3d_dx::cli::testing
