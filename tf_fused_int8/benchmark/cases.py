"""The benchmark's layers: suites, --layers specs, names and TF's SAME pads.

TF-free apart from tf_fused_int8.testing (the case generator the tests use).
"""

from tf_fused_int8 import testing


class SpecError(ValueError):
  """A --layers entry that cannot be parsed (a usage error)."""


def _parse_triple(text, what):
  parts = text.lower().split("x")
  if len(parts) != 3:
    raise ValueError(f"{what} must look like AxBxC, got {text!r}")
  return tuple(int(p) for p in parts)


def suite_cases(suite, batch):
  if suite == "mobilenet_v2_dw":
    return testing.mobilenet_v2_depthwise_cases(batch)
  if suite == "mobilenet_v2":
    return testing.mobilenet_v2_cases(batch)
  return testing.resnet50_cases(batch)


def layer_cases(layer_specs, batch, suite="resnet50"):
  """ConvCases for the --layers specs (all of the suite's layers by default)."""
  known = suite_cases(suite, batch)
  if not layer_specs:
    return known
  cases = []
  for spec in layer_specs:
    spec = spec.strip()
    if spec.isdigit():
      if int(spec) >= len(known):
        raise SpecError(f"--layers entry {spec!r}: the {suite} suite has "
                        f"layers 0-{len(known) - 1}")
      cases.append(known[int(spec)])
      continue
    try:
      parts = spec.split(":")
      if len(parts) not in (3, 4):
        raise ValueError("expected 3 or 4 ':'-separated parts")
      image, kernel, stride = parts[:3]
      h, w, ci = _parse_triple(image, "image")
      kh, kw, co = _parse_triple(kernel, "kernel")
      s = int(stride)
      groups = 1
      if len(parts) == 4:
        if not parts[3].lower().startswith("g"):
          raise ValueError("the groups part must look like g<GROUPS>")
        groups = int(parts[3][1:])
        if groups < 1 or ci % groups or co % groups:
          raise ValueError(f"groups {groups} must divide Ci {ci} and Co {co}")
    except ValueError as e:
      raise SpecError(
          f"--layers entry {spec!r}: expected an index 0-"
          f"{len(known) - 1} or HxWxCi:KhxKwxCo:stride[:gGROUPS] ({e})") from e
    cases.append(testing.ConvCase(batch=batch, height=h, width=w,
                                  in_channels=ci, kernel_h=kh, kernel_w=kw,
                                  out_channels=co, stride_h=s, stride_w=s,
                                  padding="SAME", groups=groups))
  return cases


def reads_relu_output(suite, case, custom):
  """Whether `case` reads a ReLU's output in the suite's model, so its input
  is in [0, 127] there: every ResNet-50 layer but the stem (3 channels);
  MobileNetV2's depthwise layers and its 1x1 projections (fewer output than
  input channels), not its stem or its expansions, which read a linear
  projection plus its residual. Custom --layers specs (`custom`) are not
  from a model: False."""
  if custom or case.in_channels == 3:
    return False
  if suite == "resnet50":
    return True
  if is_depthwise(case):
    return True
  return (suite == "mobilenet_v2" and case.kernel_h == case.kernel_w == 1
          and case.out_channels < case.in_channels)


def layer_name(case):
  name = (f"{case.height}x{case.width}x{case.in_channels} "
          f"{case.kernel_h}x{case.kernel_w}x{case.out_channels} "
          f"s{case.stride_h}")
  if is_depthwise(case):
    name += " dw"
  elif case.groups > 1:
    name += f" g{case.groups}"
  return name


def is_depthwise(case):
  return case.groups > 1 and case.groups == case.in_channels


def same_pads(case):
  """TF's padding of `case` as (top, bottom, left, right)."""
  if case.padding != "SAME":
    return (0, 0, 0, 0)
  pads = []
  for size, k, s, d in ((case.height, case.kernel_h, case.stride_h,
                         case.dilation_h),
                        (case.width, case.kernel_w, case.stride_w,
                         case.dilation_w)):
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    pads += [total // 2, total - total // 2]
  return tuple(pads)


def layer_spec(case):
  """The plain-JSON description of a case that the workers build from."""
  return dict(batch=case.batch, height=case.height, width=case.width,
              in_channels=case.in_channels, kernel_h=case.kernel_h,
              kernel_w=case.kernel_w, out_channels=case.out_channels,
              stride_h=case.stride_h, stride_w=case.stride_w,
              dilation_h=case.dilation_h, dilation_w=case.dilation_w,
              padding=case.padding, pads=list(same_pads(case)),
              groups=case.groups, activation=case.activation,
              depthwise=is_depthwise(case), name=layer_name(case))
