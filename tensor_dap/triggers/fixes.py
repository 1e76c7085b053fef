"""What each diagnosis says: the likely cause in the user's terms and the usual fix, one line a rule of ``diagnose``
picks (the words apart from the rules, so that a rule reads as a rule and the words can be read together)."""

from __future__ import annotations

DIVERGENCE_FIX = "lower the learning rate or clip gradients (torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))"
DIAGNOSES = {
    "masked_softmax": "a softmax row whose entries are all -inf (a fully masked row) gives NaN: mask with a "
                      "large negative number (torch.finfo(dtype).min) instead of -inf, or guard rows with "
                      "nothing to attend to",
    "masked_attention": "a query whose every key is masked (key_padding_mask or attn_mask True across a whole row: "
                        "an all-padding sequence) gives NaN in the attention's softmax: drop empty sequences from "
                        "the batch, or leave one key unmasked (e.g. the first token)",
    "log": "log of zero is -inf (and of a negative number NaN): add an epsilon (log(x + eps)) or clamp "
           "(x.clamp_min(eps)) first; for p * log(...) terms (an entropy, a KL divergence), torch.xlogy(p, x) is 0 "
           "where p is 0",
    "log_softmax": "log of zero is -inf, here of a softmax whose smallest probabilities underflowed to 0: take "
                   "torch.log_softmax(x, dim) instead of torch.log(torch.softmax(x, dim)), which stays finite "
                   "(F.cross_entropy takes the logits, with class-index or soft targets)",
    "log_sigmoid": "log of zero is -inf, here of a sigmoid that saturated (in float32 sigmoid(x) is 0 below x ≈ -88, "
                   "and 1 - sigmoid(x) is 0 above x ≈ 17): compute the log from the logits, F.logsigmoid(x) for "
                   "log(sigmoid(x)) and F.logsigmoid(-x) for log(1 - sigmoid(x)), or take "
                   "F.binary_cross_entropy_with_logits(x, target) for a hand-written BCE",
    "sqrt": "sqrt has an infinite gradient at 0 and is NaN below it, and torch.where does not stop the unused "
            "branch's NaN gradient: clamp the input first (torch.sqrt(x.clamp_min(eps)))",
    "sqrt_zero": "sqrt's gradient at 0 is infinite, and times the 0 that reaches it is NaN: a distance or norm "
                 "between equal points (torch.sqrt(((a - b) ** 2).sum(-1)) with a == b): add an epsilon inside "
                 "(torch.sqrt(s + eps)), or use torch.linalg.vector_norm / F.pairwise_distance, whose gradient at 0 "
                 "is defined",
    "pow_zero": "x ** p with p below 1 has an infinite gradient at x = 0, and times the 0 that reaches it is NaN (a "
                "focal loss's (1 - pt) ** gamma with gamma < 1, once a sample is classified with certainty: pt = 1): "
                "clamp the base first ((1 - pt).clamp_min(eps) ** gamma), or take gamma >= 1",
    "sqrt_either": "sqrt's gradient is infinite at 0 and NaN below 0: a distance or norm between equal points "
                   "(torch.sqrt(((a - b) ** 2).sum(-1)) with a == b), or a negative input that a torch.where hid in "
                   "the forward (the unused branch's NaN gradient still flows): add an epsilon inside (torch.sqrt(s "
                   "+ eps)) or clamp it (x.clamp_min(eps)); for a distance, torch.linalg.vector_norm or "
                   "F.pairwise_distance, whose gradient at 0 is defined",
    "sqrt_forward": "sqrt of a negative number is NaN: make sure its input cannot be negative (a log-variance is "
                    "not a variance: std = torch.exp(0.5 * logvar)) or clamp it (torch.sqrt(x.clamp_min(eps)))",
    # deg.pow(-0.5) of a graph's isolated node (a GCN's D^-1/2 A D^-1/2), 1 / sqrt of an empty group's count
    "negative_power": "a negative power of zero is Inf (x ** -0.5 and rsqrt(x) divide by sqrt(0)): a degree or count "
                      "of 0 (a graph node with no edges, an empty group) or the mean square of a zero vector (an "
                      "RMSNorm without eps): add an epsilon (torch.rsqrt(x + eps)) or clamp it first "
                      "(x.clamp_min(eps)), or zero the Infs it gives (y.masked_fill(x == 0, 0))",
    "div": "division by zero: add an epsilon to the denominator (x / (norm + eps)) or clamp it (norm.clamp_min(eps))",
    # a division in a package's code (peft's DoRA: magnitude / weight_norm): the zero comes from what it was handed
    "div_library": "division by zero inside {owner}'s code: what it divides by comes from what your model or data "
                   "hands it, so look there at the rows the note names: a weight row or an input that is all zeros "
                   "(pruned, dead, padding) or an empty group",
    "weight_norm": "weight_norm divides each row of the weight by its norm, and a row of zeros (a unit that died, "
                   "or was initialized or pruned to 0) gives 0/0: re-initialize such rows, or drop weight_norm for "
                   "a normalization with an epsilon (F.normalize(w, dim=1, eps=1e-12))",
    "masked_subtract": "a row whose entries are all -inf (a fully masked row) has a max and a logsumexp of -inf, and "
                       "-inf - (-inf) is NaN: mask with a large negative number (torch.finfo(dtype).min) instead of "
                       "-inf, or guard rows with nothing left to choose",
    "arc": "acos, asin and atanh are NaN outside [-1, 1] and their gradients are infinite at ±1: a cosine between "
           "equal vectors is 1 (or rounds just past it); clamp the input first (x.clamp(-1 + 1e-6, 1 - 1e-6))",
    "std_single": "the std (or var) of a single value is NaN: it divides by n - 1 = 0, here over a batch or group "
                  "of one (an epoch's last, short batch: DataLoader(..., drop_last=True)); pass correction=0 for the "
                  "population std, or skip batches of one",
    "exp": ("exp overflowed: subtract the maximum first (torch.logsumexp, softmax; F.softplus for log(1 + exp(x))) "
            "or clamp its input"),
    # pure float16 training (model.half()) with Adam: its eps is added in float16
    "eps_vanishes": "{optimizer}'s eps={eps:g} is 0 in {dtype}, so its update divides 0 by 0 where a gradient was 0 "
                    "(an embedding row of a token not in the batch) and by 0 where one squared to 0: keep the "
                    "parameters in float32 and compute in half precision under torch.autocast (float16 with a "
                    "torch.amp.GradScaler, or bfloat16), or set eps=1e-4 or more",
    "fp16": "float16 overflow (its largest value is 65504): compute in bfloat16 "
            "(torch.autocast(dtype=torch.bfloat16)) or keep this op in float32",
    # a GradScaler skips a step whose gradients overflowed (and lowers its scale): it cannot help a forward
    "fp16_backward": "float16 overflow in the gradients (its largest value is 65504): compute in bfloat16 "
                     "(torch.autocast(dtype=torch.bfloat16)), keep this op in float32, or let a torch.amp.GradScaler "
                     "skip such steps",
    "empty_mean": "the mean over an empty selection is 0/0: this batch has no element the term keeps (a mask with "
                  "no True: no positive sample, every target filtered out): skip the term when it is empty (if "
                  "mask.any()), or sum it and divide by max(1, count)",
    "no_targets": "every target of this batch is the ignore_index ({index}: a batch of padding only, or a mask "
                  "that covers every position), and the mean over zero targets is 0/0: skip batches with no real "
                  "targets, or sum the loss and divide by max(1, number of targets)",
    "ctc": "CTC's loss is infinite for a sample that its input is too short to align to{samples}: a target of L "
           "labels needs L frames, plus one for each label repeated next to itself, and its gradient is NaN whatever "
           "multiplies it: keep more frames (less downsampling), or drop or trim such samples; zero_infinity=True in "
           "nn.CTCLoss (F.ctc_loss) gives them zero loss and gradient, so the run goes on but they teach nothing",
    "input": "the batch itself holds NaN/Inf: check the data pipeline (assert torch.isfinite(batch).all() where it "
             "is made) or skip such batches",
    "input_no_grad": "a tensor the loss takes without gradient holds NaN/Inf: the batch or its targets, or a value "
                     "computed from them outside autograd (returns normalized by the std of a single value, class "
                     "weights, a mask): assert torch.isfinite(t).all() where it is made, or skip such batches",
    "custom_backward": "{function}.backward, written by hand, made {what} from finite gradients{at}: a division, "
                       "log or sqrt there of a value its forward guards (a clamp, an epsilon) without the same guard? "
                       "Check it with torch.autograd.gradcheck on inputs at that edge (zeros)",
    "divergence": f"the training diverged: {DIVERGENCE_FIX}",
    # clipping bounds each gradient, not each update (Adam's steps are about lr in size whatever the gradient's)
    "divergence_clipped": "the training diverged although its gradients are clipped ({clip}): lower the learning "
                          "rate (or the peak of its warm-up)",
    # a bound far above every norm the gradients had is no clipping at all (HF's max_grad_norm of 1e9)
    "divergence_unclipped": "the training diverged, and its gradients are clipped at {clip}, far above every norm "
                            "they had (at most {seen:.3g}): that clipping never acts; lower the learning rate or clip "
                            "at a norm they reach (torch.nn.utils.clip_grad_norm_(model.parameters(), {suggest:g}))",
    "above_at_start": "the loss was above the threshold at the first step it was compared, before any rise: this "
                      "run's loss starts there (a threshold for divergence goes above where the loss starts)",
    "above_no_rise": "the loss crossed the threshold without a rise ({first:.4g} to {last:.4g} over its last {n} "
                     "values): the threshold sits where this run's loss is, which is not a divergence (set it above "
                     "where the loss runs)",
    "scaler": "the GradScaler's scale collapsed: the gradients are non-finite even unscaled, so this is not an "
              "fp16 overflow the scaler can skip; look at the op named here",
    # a log-determinant, determinant, inverse or solve of a matrix that lost rank (a flow's invertible layer)
    "singular": ("the matrix is singular (or nearly): its determinant is 0, so its log-determinant is -inf, and its "
                 "inverse, a solve with it and their gradients blow up: keep it invertible (parametrize it, as Glow's "
                 "LU-decomposed 1x1 convolution does, or add eps * I) and look at what made it lose rank (two equal "
                 "rows, a zero row or column)"),
    # a crash on a NaN the program made after the model (``crash_outside``): a row of -inf the program masked whole
    "masked_row": ("{name}: {rows}: a softmax, log-softmax or distribution over such a row is NaN "
                   "(-inf - logsumexp(-inf)); guard such rows (a state with no legal action, a query with no key to "
                   "attend to) or mask with torch.finfo(dtype).min instead of -inf"),
    # an update from finite gradients whose optimizer state for the parameter held NaN before it
    "state_nan": ("{optimizer}'s state for this parameter holds NaN ({key}) while the gradients it used were finite: "
                  "the state was non-finite before the update (an optimizer checkpoint saved from a run gone NaN, "
                  "loaded with load_state_dict): start the optimizer's state afresh or load an earlier checkpoint"),
    # a parameter group's learning rate that is itself NaN or Inf: told before any other rule
    "lr_nonfinite": ("the learning rate is {lr}, so every update with it makes the parameters non-finite: what set "
                     "it divided by zero or overflowed (a scheduler's lambda over a warmup or decay of 0 steps, a "
                     "schedule read past its end); print optimizer.param_groups[0]['lr'] after each scheduler.step()"),
}
