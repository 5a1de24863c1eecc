"""@local_tf: the pip-installed TensorFlow, exposed to Bazel without downloading or copying.

Inputs come from `--repo_env` values that ./configure.sh writes into .bazelrc, all taken from the
venv's tf.sysconfig.get_compile_flags() / get_link_flags():

  TF_HEADER_DIR           .../site-packages/tensorflow/include
  TF_SHARED_LIBRARY_DIR   .../site-packages/tensorflow
  TF_SHARED_LIBRARY_NAME  libtensorflow_framework.so.2

The include directory and the framework library are SYMLINKED into the repository (copying the
~9k headers takes a minute and 400+ MB). Targets:

  @local_tf//:tf_header_lib             TF's headers, on the -isystem path (their warnings stay quiet)
  @local_tf//:cuda_headers              the CUDA 12.5 / cuDNN 9 headers the wheel ships (headers only)
  @local_tf//:libtensorflow_framework   the framework shared library, to link against (by SONAME,
                                        no RUNPATH: see link_shared.bzl)
  @local_tf//:libtensorflow_framework.so.2   the file itself
"""

_ENV_VARS = ["TF_HEADER_DIR", "TF_SHARED_LIBRARY_DIR", "TF_SHARED_LIBRARY_NAME"]

def _fail_unconfigured(what):
    fail(("@local_tf: %s. Run ./configure.sh first: it writes the --repo_env values " +
          "TF_HEADER_DIR, TF_SHARED_LIBRARY_DIR, TF_SHARED_LIBRARY_NAME into .bazelrc.") % what)

def _tf_configure_impl(ctx):
    env = {}
    for name in _ENV_VARS:
        value = ctx.os.environ.get(name, "").strip()
        if not value:
            _fail_unconfigured("%s is not set" % name)
        env[name] = value

    header_dir = ctx.path(env["TF_HEADER_DIR"])
    lib_name = env["TF_SHARED_LIBRARY_NAME"]
    lib = ctx.path(env["TF_SHARED_LIBRARY_DIR"] + "/" + lib_name)
    if not header_dir.exists or not header_dir.get_child("tensorflow").exists:
        _fail_unconfigured("%s is not a TensorFlow include directory" % header_dir)
    if not lib.exists:
        _fail_unconfigured("%s does not exist" % lib)

    ctx.symlink(header_dir, "include")
    ctx.symlink(lib, lib_name)
    ctx.template(
        "BUILD",
        Label("//third_party/tf:BUILD.local_tf.tpl"),
        substitutions = {"%{TF_SHARED_LIBRARY_NAME}": lib_name},
        executable = False,
    )

tf_configure = repository_rule(
    implementation = _tf_configure_impl,
    environ = _ENV_VARS,
    doc = "Symlinks the pip-installed TensorFlow's headers and framework library (no download).",
)
