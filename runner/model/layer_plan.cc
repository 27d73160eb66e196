#include "runner/model/layer_plan.h"

#include <algorithm>
#include <string>

#include "runner/model/dropout_mask.h"

namespace ringtrain::model {

Pads SamePadding(int in, int out, int kernel, int stride) {
  const int total = std::max((out - 1) * stride + kernel - in, 0);
  return {total / 2, total - total / 2};
}

StatusOr<LayerPlan> PlanLayers(const ModelSpec& spec) {
  ASSIGN_OR_RETURN(const ShapeReport report, InferShapes(spec));
  if (!(report.output.h == 1 && report.output.w == 1)) {
    return InvalidArgument("model: the output is " + std::to_string(report.output.c) + "x" +
                           std::to_string(report.output.h) + "x" + std::to_string(report.output.w) +
                           ", the loss needs a flat output (a flatten and a dense at the end)");
  }
  LayerPlan plan;
  plan.loss = spec.loss;
  plan.outputs = report.output.c;
  Shape shape = spec.input;
  std::uint64_t dropout_offset = 0;
  for (std::size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& s = spec.layers[i];
    PlannedLayer p;
    p.kind = s.kind;
    p.in = shape;
    p.out = report.layers[i].out;
    shape = p.out;
    switch (s.kind) {
      case LayerKind::kDense:
        p.num_params = static_cast<std::size_t>(p.out.c) * (p.in.size() + 1);
        break;
      case LayerKind::kConv2d: {
        p.kernel = s.kernel;
        p.stride = s.stride;
        if (s.padding == Padding::kSame) {
          const Pads h = SamePadding(p.in.h, p.out.h, s.kernel, s.stride);
          const Pads w = SamePadding(p.in.w, p.out.w, s.kernel, s.stride);
          p.pad_top = h.before;
          p.pad_bottom = h.after;
          p.pad_left = w.before;
          p.pad_right = w.after;
        }
        p.num_params = static_cast<std::size_t>(p.out.c) *
                       (static_cast<std::size_t>(p.in.c) * s.kernel * s.kernel + 1);
        break;
      }
      case LayerKind::kMaxPool2d:
      case LayerKind::kAvgPool2d:
        p.pool = s.pool;
        p.stride = s.stride;
        break;
      case LayerKind::kDropout:
        if (s.rate <= 0.0) continue;  // the identity, and no stream (as Model::Create)
        p.rate = s.rate;
        dropout_offset += kDropoutStreamStride;
        p.dropout_offset = dropout_offset;
        break;
      case LayerKind::kSoftmax:
        continue;  // last, under softmax cross-entropy (InferShapes checked): part of the loss
      case LayerKind::kFlatten:
      case LayerKind::kRelu:
      case LayerKind::kTanh:
      case LayerKind::kSigmoid:
      case LayerKind::kGelu:
        break;
    }
    if (p.num_params > 0) {
      p.range = static_cast<int>(plan.ranges.size());
      plan.ranges.push_back({plan.num_params, p.num_params});
      plan.num_params += p.num_params;
    }
    plan.layers.push_back(p);
  }
  return plan;
}

}  // namespace ringtrain::model
