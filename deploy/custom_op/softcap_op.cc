// SoftCap, y = cap * tanh(x / cap), as an ONNX Runtime custom op in the domain "course.custom".
// Built and loaded by notebooks/10_custom_operators.ipynb (section 7); the pattern follows ONNX Runtime's own
// test library, onnxruntime/test/testdata/custom_op_library/custom_op_library.cc.
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

// A custom-op library is not linked with onnxruntime: it receives the API from the session at registration,
// so the C++ wrapper must not initialise it statically (ORT_API_MANUAL_INIT, then Ort::InitApi below).
#define ORT_API_MANUAL_INIT
#include "onnxruntime_cxx_api.h"
#undef ORT_API_MANUAL_INIT
#include "onnxruntime_lite_custom_op.h"

namespace {

struct SoftCap {
  // Called once per node when the session is created: read the attributes here. A missing attribute throws an
  // Ort::Exception; the Lite API's CreateKernel lets it through and ONNX Runtime reports it as a session-creation error.
  SoftCap(const OrtApi* /*api*/, const OrtKernelInfo* info) {
    cap_ = Ort::ConstKernelInfo{info}.GetAttribute<float>("cap");
  }

  // Called on every run. Not const: the Lite API registers a non-const member function. Returning an Ort::Status
  // (the Lite API's KernelComputeV2) reports a failure, such as an allocation error, to ONNX Runtime as a status.
  Ort::Status Compute(const Ort::Custom::Tensor<float>& x, Ort::Custom::Tensor<float>& y) {
    try {
      const float* in = x.Data();
      float* out = y.Allocate(x.Shape());
      for (int64_t i = 0; i < x.NumberOfElement(); ++i) out[i] = cap_ * std::tanh(in[i] / cap_);
    } catch (const std::exception& error) {
      return Ort::Status{error};
    }
    return Ort::Status{nullptr};  // success
  }

  // ORT's shape inference for the node: the output has the input's shape (and the float type).
  static OrtStatusPtr InferOutputShape(Ort::ShapeInferContext& ctx) {
    return ctx.SetOutputShape(0, ctx.GetInputShape(0)).release();
  }

  float cap_ = 5.0f;
};

// Each registration gets its own domain object, kept alive for as long as the library is loaded.
void KeepAlive(Ort::CustomOpDomain&& domain) {
  static std::vector<Ort::CustomOpDomain> domains;
  static std::mutex lock;
  std::lock_guard<std::mutex> guard(lock);
  domains.push_back(std::move(domain));
}

}  // namespace

extern "C" OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options, const OrtApiBase* api_base) {
  // Ask for the API version these headers were written for. A runtime older than the headers has no such version:
  // GetApi returns NULL, and Ort::InitApi(NULL) would crash the process at the first call, so report it instead
  // (version 1 of the API, which every runtime has, creates the status).
  const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
  if (api == nullptr) {
    const std::string message = "this library was built with ONNX Runtime headers of C API version " +
                                std::to_string(ORT_API_VERSION) +
                                ", newer than this runtime: rebuild it with headers of this runtime's version or older";
    return api_base->GetApi(1)->CreateStatus(ORT_FAIL, message.c_str());
  }
  Ort::InitApi(api);
  static const std::unique_ptr<Ort::Custom::OrtLiteCustomOp> soft_cap{
      Ort::Custom::CreateLiteCustomOp<SoftCap>("SoftCap", "CPUExecutionProvider")};
  try {
    Ort::CustomOpDomain domain{"course.custom"};
    domain.Add(soft_cap.get());
    Ort::UnownedSessionOptions{options}.Add(domain);
    KeepAlive(std::move(domain));
  } catch (const std::exception& error) {
    return Ort::Status{error}.release();  // a registration error becomes an OrtStatus
  }
  return nullptr;
}
