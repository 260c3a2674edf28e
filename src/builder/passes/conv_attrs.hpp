// A 2D convolution's stride, padding, dilation and groups as the builder passes that test them read them.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.hpp"
#include "graph/op_def.hpp"

namespace tensoracle::builder {

struct Conv2dAttrs {
  std::vector<std::int64_t> stride, padding, dilation;  // [h, w]; an absent attribute is its default on both axes
  std::int64_t groups = 1;

  // Stride 2 and dilation 1 on both axes: what a stem's space-to-depth forms take.
  bool stride2_undilated() const {
    return stride == std::vector<std::int64_t>{2, 2} && dilation == std::vector<std::int64_t>{1, 1};
  }
};

inline Conv2dAttrs conv2d_attrs(const graph::Layer& conv) {
  const graph::AttrReader attrs(conv.attrs, conv.name, conv.op);
  const auto pair = [&](const char* name, std::int64_t fallback) {
    std::vector<std::int64_t> v = attrs.get_ints(name, std::vector<std::int64_t>{});
    return v.empty() ? std::vector<std::int64_t>{fallback, fallback} : v;
  };
  return Conv2dAttrs{pair("stride", 1), pair("padding", 0), pair("dilation", 1), attrs.get_int("groups", 1)};
}

}  // namespace tensoracle::builder
