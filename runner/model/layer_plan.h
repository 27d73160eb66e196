// How an accelerator runs a ModelSpec (the CUDA model, runner/model/cuda/gpu_model.cc): the
// spec's layers with their shapes, Keras' "same" padding split into its four sides (the odd pixel
// at the bottom/right, which cuDNN's symmetric padding cannot express), the dropout layers'
// stream offsets (Model::SeedDropout's), a softmax folded into the loss, and the flat parameter
// layout Model::Create(spec) gives. Host-only and light, so the plan is tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "runner/model/model.h"
#include "runner/model/model_spec.h"

namespace ringtrain::model {

// Keras' "same" padding of one dimension: (out − 1)·stride + kernel − in zeros in all (none when
// negative), the odd one after.
struct Pads {
  int before = 0;
  int after = 0;
};
Pads SamePadding(int in, int out, int kernel, int stride);

struct PlannedLayer {
  LayerKind kind = LayerKind::kRelu;  // never kSoftmax (folded), never a dropout of rate 0
  Shape in;
  Shape out;
  int kernel = 0;  // conv2d
  int stride = 1;  // conv2d, pools
  int pool = 0;    // pools
  // conv2d: zeros added on each side of the input; (in + top + bottom − kernel) / stride + 1 is
  // out. symmetric() when one pad on every side does it (cuDNN's own padding).
  int pad_top = 0;
  int pad_bottom = 0;
  int pad_left = 0;
  int pad_right = 0;
  double rate = 0;                   // dropout
  std::uint64_t dropout_offset = 0;  // dropout: added to the model's dropout seed
  int range = -1;                    // index into LayerPlan::ranges, or -1 without parameters
  std::size_t num_params = 0;        // weights then out.c biases

  bool symmetric() const {
    return pad_top == pad_bottom && pad_left == pad_right && pad_top == pad_left;
  }
  // The input a convolution reads after explicit padding.
  Shape padded_in() const {
    return {in.c, in.h + pad_top + pad_bottom, in.w + pad_left + pad_right};
  }
};

struct LayerPlan {
  std::vector<PlannedLayer> layers;
  std::vector<ParamRange> ranges;  // one per parameterized layer, in order: Model's layer_ranges
  std::size_t num_params = 0;
  Loss loss = Loss::kSoftmaxCrossEntropy;
  int outputs = 0;  // classes, or the width of the regression targets
};

// InferShapes, then the plan. InvalidArgument (the layer named) for a spec that does not fit or
// whose output is not flat, as Model::Create(spec).
StatusOr<LayerPlan> PlanLayers(const ModelSpec& spec);

}  // namespace ringtrain::model
