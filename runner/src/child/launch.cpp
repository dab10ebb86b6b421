#include "launch.h"

namespace atrex::runner {

using problems::DType;

LaunchBuilder::LaunchBuilder(const problems::ResolvedShape& shape, DLDevice device, void* stream) {
  const size_t n_tensors = shape.inputs.size() + shape.outputs.size();
  dims_.reserve(n_tensors);
  names_.reserve(n_tensors + 2 * shape.params.size() + 2);
  auto make_tensor = [&](const problems::TensorDesc& d) {
    dims_.push_back(d.dims);
    names_.push_back(d.name);
    AtrexNamedTensor t{};
    t.name = names_.back().c_str();
    t.tensor.data = nullptr;
    t.tensor.device = device;
    t.tensor.ndim = static_cast<int32_t>(d.dims.size());
    t.tensor.dtype = problems::dl_data_type(d.dtype);
    t.tensor.shape = dims_.back().data();
    t.tensor.strides = nullptr;
    t.tensor.byte_offset = 0;
    return t;
  };
  for (const auto& d : shape.inputs) inputs_.push_back(make_tensor(d));
  for (const auto& d : shape.outputs) outputs_.push_back(make_tensor(d));

  lists_.reserve(shape.params.size());
  for (const auto& [key, value] : shape.params.items()) {
    names_.push_back(key);
    AtrexParam p{};
    p.name = names_.back().c_str();
    if (value.is_boolean()) {
      p.kind = ATREX_PARAM_BOOL;
      p.int_value = value.get<bool>() ? 1 : 0;
      p.float_value = static_cast<double>(p.int_value);
    } else if (value.is_number_integer()) {
      p.kind = ATREX_PARAM_INT;
      p.int_value = value.get<int64_t>();
      p.float_value = static_cast<double>(p.int_value);
    } else if (value.is_number()) {
      p.kind = ATREX_PARAM_FLOAT;
      p.float_value = value.get<double>();
    } else if (value.is_string()) {
      p.kind = ATREX_PARAM_STRING;
      names_.push_back(value.get<std::string>());
      p.string_value = names_.back().c_str();
    } else if (value.is_array()) {
      p.kind = ATREX_PARAM_INT_LIST;
      std::vector<int64_t> list;
      for (const auto& e : value) list.push_back(e.is_number() ? e.get<int64_t>() : 0);
      lists_.push_back(std::move(list));
      p.int_list = lists_.back().data();
      p.int_list_length = static_cast<int64_t>(lists_.back().size());
    } else {
      continue;  // null: not passed
    }
    params_.push_back(p);
  }
  names_.push_back(shape.def->name);
  launch_.operator_name = names_.back().c_str();
  names_.push_back(shape.shape_id);
  launch_.shape_id = names_.back().c_str();
  launch_.abi_version = ATREX_CANDIDATE_ABI_VERSION;
  launch_.inputs = inputs_.data();
  launch_.num_inputs = static_cast<int32_t>(inputs_.size());
  launch_.outputs = outputs_.data();
  launch_.num_outputs = static_cast<int32_t>(outputs_.size());
  launch_.params = params_.data();
  launch_.num_params = static_cast<int32_t>(params_.size());
  launch_.stream = stream;
}

}  // namespace atrex::runner
