// Uses only the installed public header: a 1-D problem small enough to check by hand.
#include <conv3d_dx/conv3d_dx.hpp>
#include <cstdio>

int main() {
  using namespace conv3d_dx;
  // y (W = 3) from dy (W = 3) and a 2-tap filter, front pad 1: y[i] = dy[i] * w[1] + dy[i + 1] * w[0].
  const float dy[3] = {2, -3, 1}, w[2] = {5, -1};
  float y[3] = {0, 0, 0};
  ProblemSpec spec;
  spec.attrs.data_format = Layout::NCDHW;
  spec.attrs.input_size = {1, 1, 1, 1, 3};
  spec.attrs.pads = {0, 0, 0, 0, 1, 0};
  spec.out_backprop = TensorView::contiguous(dy, DType::f32, Layout::NCDHW, {1, 1, 1, 1, 3});
  spec.filter = TensorView::contiguous(w, DType::f32, Layout::NCDHW, {1, 1, 1, 1, 2});
  spec.y = TensorView::contiguous(y, DType::f32, Layout::NCDHW, {1, 1, 1, 1, 3});
  conv3d_backprop_input(spec);
  const float want[3] = {-17, 8, -1};
  for (int i = 0; i < 3; ++i)
    if (y[i] != want[i]) {
      std::printf("y[%d] = %g, want %g\n", i, y[i], want[i]);
      return 1;
    }
  std::printf("installed conv3d-dx works: y = %g %g %g\n", y[0], y[1], y[2]);
  return 0;
}
