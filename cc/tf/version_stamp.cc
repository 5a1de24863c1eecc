// Copyright tf-fused-int8 authors. Apache 2.0.
//
// Records the TensorFlow version this library was compiled against as a plain
// string in the binary. tf_fused_int8/_loader.py reads it from the file,
// without loading the library, so a TF version mismatch is reported clearly
// instead of as an undefined symbol or a crash. TF's pip headers do not carry
// the version (TF_MAJOR_VERSION is a build-time define of TF itself), so the
// build passes it: -DTF_FUSED_INT8_TF_VERSION=\"2.21.0\" (configure.sh writes
// it into .bazelrc from the venv's tf.__version__).
#ifndef TF_FUSED_INT8_TF_VERSION
#error "TF_FUSED_INT8_TF_VERSION must be defined by the build (see configure.sh)"
#endif

extern "C" __attribute__((visibility("default"), used))
const char tf_fused_int8_build_stamp[] =
    "TF_FUSED_INT8_BUILT_WITH_TF=" TF_FUSED_INT8_TF_VERSION ";";
