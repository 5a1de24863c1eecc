"""A C++ dependency that links a prebuilt shared library by its path, adding no RUNPATH."""

def _cc_shared_library_by_path_impl(ctx):
    lib = ctx.file.shared_library
    linker_input = cc_common.create_linker_input(
        owner = ctx.label,
        user_link_flags = depset([lib.path]),
        additional_inputs = depset([lib]),
    )
    return [
        CcInfo(linking_context = cc_common.create_linking_context(
            linker_inputs = depset([linker_input]),
        )),
        DefaultInfo(files = depset([lib])),
    ]

cc_shared_library_by_path = rule(
    implementation = _cc_shared_library_by_path_impl,
    attrs = {
        "shared_library": attr.label(allow_single_file = True, mandatory = True),
    },
    provides = [CcInfo],
    doc = """Links `shared_library` by its path on the link line. The linker records the library's
SONAME as DT_NEEDED; unlike cc_library(srcs = [lib.so]) / cc_import, Bazel adds no
$ORIGIN/_solib_* RUNPATH entries and no solib symlink.""",
)
