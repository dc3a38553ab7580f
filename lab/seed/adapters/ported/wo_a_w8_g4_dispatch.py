# --- LAB STAND-IN of a ported G=4 small-row dispatch for the pinned canary, appended to the checkout's
# wo_a_w8.py when a lab test builds a canary image that carries it (tests/playbooks/experiment_lab.py,
# build_canary_image). The canary's DeepseekV4Attention.wo_a_forward takes its small-row kernel only for the
# TP4 shapes, (2, 4096) activations and (2, 1024, 4096) weights; TP3 has G=4 local groups, so the port
# replaces that dispatch with one that admits this rank's group count. The lab image check reads this text
# (engine_image_check: the adapter assigns the guarded function), nothing executes it.
_install_tp3_twins = install


def _g4_wo_a_forward(self, x):
    if self.wo_a_w8 is not None and x.shape[0] <= 8 and len(self.wo_a_w8) == len(self.wo_a_groups):
        return self.small_row_kernel(x)
    return self.einsum(x)


def install():  # noqa: F811 - the port extends the local install with the G=4 dispatch
    _install_tp3_twins()
    from sglang.srt.models import deepseek_v4  # noqa: WPS433

    deepseek_v4.DeepseekV4Attention.wo_a_forward = _g4_wo_a_forward
