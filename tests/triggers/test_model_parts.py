"""A model with no forward of its own, run through its parts: CleanRL's PPO agent, whose ``get_action_and_value``
calls ``agent.actor`` and ``agent.critic`` (the agent itself is never called). ``watch(agent)`` captures each part's
calls and re-runs them; ``tensor-dap run`` watches the agent, not the part that happened to run first."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import tensor_dap
from tensor_dap import NonFiniteError
from tensor_dap.triggers.report import to_text

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::UserWarning")]

AGENT = '''
import torch
from torch import nn
from torch.distributions import Categorical


class SqrtGate(nn.Module):
    """sqrt of the positive part, through torch.where: its gradient is NaN where the input is negative."""

    armed = False

    def forward(self, x):
        return torch.where(x > 0, torch.sqrt(x), x) if self.armed else torch.tanh(x)  # BIRTH


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(4, 16), SqrtGate(), nn.Linear(16, 1))
        self.actor = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        probs = Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def train(agent, optimizer, updates, armed_at=None, gen=None):
    for update in range(updates):
        agent.critic[1].armed = armed_at is not None and update >= armed_at
        with torch.no_grad():  # the rollout: the policy acts, no gradients
            obs = torch.randn(64, 4, generator=gen)
            actions, old_logp, _, _ = agent.get_action_and_value(obs)
            returns = torch.randn(64, generator=gen)
        _, logp, entropy, value = agent.get_action_and_value(obs, actions)
        adv = returns - value.detach().squeeze(1)
        loss = (-(torch.exp(logp - old_logp) * adv).mean() + 0.5 * ((value.squeeze(1) - returns) ** 2).mean()
                - 0.01 * entropy.mean())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''
ARMED_AT = 3


@pytest.fixture()
def agent_module(tmp_path, monkeypatch):
    (tmp_path / "agent.py").write_text(AGENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("agent", None)
    import agent
    yield agent
    sys.modules.pop("agent", None)


def _built(agent_module, seed=0):
    torch.manual_seed(seed)
    agent = agent_module.Agent()
    return agent, torch.optim.Adam(agent.parameters(), lr=1e-3), torch.Generator().manual_seed(seed + 1)


def test_a_model_with_no_forward_is_captured_through_its_parts_and_names_the_birthplace(agent_module, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    agent, optimizer, gen = _built(agent_module)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(agent, optimizer, on="raise"):
        agent_module.train(agent, optimizer, 10, armed_at=ARMED_AT, gen=gen)
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (ARMED_AT, "backward", "critic.1",
                                                                     "SqrtBackward0"), report.headline
    assert report.source["text"].endswith("# BIRTH") and report.bundle, report.source
    assert "torch.where does not stop" in report.diagnosis
    assert all(torch.isfinite(p).all() for p in agent.parameters())  # stopped before the update

    # the bundle keeps which part each forward called: it replays on a fresh agent
    again, optimizer2, _ = _built(agent_module, seed=7)
    again.critic[1].armed = True
    with pytest.raises(NonFiniteError) as replayed:
        tensor_dap.replay(report.bundle, again, optimizer=optimizer2, on="raise")
    assert (replayed.value.report.module, replayed.value.report.op) == ("critic.1", "SqrtBackward0")


def test_watching_a_model_run_through_its_parts_keeps_training_bit_identical(agent_module):
    runs = []
    for watched in (False, True):
        agent, optimizer, gen = _built(agent_module)
        torch.manual_seed(5)  # the rollout samples actions: watch must not move the RNG stream
        if watched:
            with tensor_dap.watch(agent, optimizer, on="raise") as w:
                agent_module.train(agent, optimizer, 12, gen=gen)
            assert not w.reports
        else:
            agent_module.train(agent, optimizer, 12, gen=gen)
        runs.append([p.detach().clone() for p in agent.parameters()] + [torch.rand(3)])
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    # and the parts are given their own calls back
    assert all("_compiled_call_impl" not in m.__dict__ for m in (agent, agent.actor, agent.critic))


def test_tensor_dap_run_watches_the_agent_not_the_part_that_ran_first(tmp_path):
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "ppo.py").write_text(textwrap.dedent(f'''
        import torch
        from agent import Agent, train

        torch.manual_seed(0)
        agent = Agent()
        optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
        train(agent, optimizer, 10, armed_at={ARMED_AT})
        print("TRAINED")
    '''))
    r = subprocess.run([sys.executable, "-m", "tensor_dap", "run", "--break-on-nan", "ppo.py"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 1 and "TRAINED" not in r.stdout, r.stderr[-3000:]
    assert f"step {ARMED_AT} · NaN born in SqrtBackward0 (the backward of sqrt), in the backward of critic.1" \
        in r.stderr, r.stderr[-3000:]
    assert "tensor_dap.watch(Agent)" in r.stderr  # the model, not its actor (the first part to run)
    assert "tensor_dap.replay(" in r.stderr and ", agent, optimizer=optimizer)" in r.stderr


def test_a_part_called_alone_is_still_its_own_model_where_nothing_holds_more():
    """The owner search looks for a module holding more of the optimizer's parameters: a model trained alone stays
    the model (a Sequential called by the loop)."""
    from tensor_dap.triggers.attach import owner_in_frames

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    other = nn.Linear(3, 3)  # in these locals too, holding none of them
    params = {id(p) for p in model.parameters()}
    assert owner_in_frames([model], params, sys._getframe()) is None
    agent = nn.Module()
    agent.actor, agent.critic = model, nn.Linear(4, 1)
    params |= {id(p) for p in agent.critic.parameters()}
    assert owner_in_frames([model], params, sys._getframe()) is agent
    assert owner_in_frames([model, agent.critic], params, sys._getframe()) is agent
    assert other is not agent


SAC = '''
import torch
from torch import nn


class Q(nn.Module):
    """A soft Q-network; the second one's forward has a sqrt-where trap that a large observation springs."""

    def __init__(self, trap=False):
        super().__init__()
        self.fc1, self.fc2, self.trap = nn.Linear(5, 16), nn.Linear(16, 1), trap

    def forward(self, x, a):
        h = self.fc1(torch.cat([x, a], 1))
        if self.trap and x.abs().max() > 10:
            h = torch.where(h > 0, torch.sqrt(h), h)  # BIRTH
        return self.fc2(torch.relu(h))


def batch(step, gen):
    x, a = torch.randn(32, 4, generator=gen), torch.randn(32, 1, generator=gen)
    target = torch.randn(32, 1, generator=gen)
    if step == 3:
        x[0, 0] = 20.0  # an observation far out of range
    return x, a, target


def build(seed=0):
    torch.manual_seed(seed)
    qf1, qf2 = Q(), Q(trap=True)
    return qf1, qf2, torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=1e-3)


def train(qf1, qf2, q_optimizer, steps, gen):
    for step in range(steps):
        x, a, target = batch(step, gen)
        q1, q2 = qf1(x, a), qf2(x, a)
        loss = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
        q_optimizer.zero_grad()
        loss.backward()
        q_optimizer.step()
'''


@pytest.fixture()
def sac_module(tmp_path, monkeypatch):
    (tmp_path / "sac_parts.py").write_text(SAC)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("sac_parts", None)
    import sac_parts
    yield sac_parts
    sys.modules.pop("sac_parts", None)


def test_several_models_one_optimizer_trains_are_watched_together(sac_module):
    """SAC's q_optimizer over two Q-networks the loop calls one by one: ``watch([qf1, qf2], q_optimizer)`` checks both
    before the update and names the part; its bundle replays on the list."""
    qf1, qf2, q_optimizer = sac_module.build()
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch([qf1, qf2], q_optimizer, on="raise"):
        sac_module.train(qf1, qf2, q_optimizer, 8, torch.Generator().manual_seed(1))
    report = info.value.report
    assert (report.step, report.module, report.op) == (3, "qf2", "SqrtBackward0"), report.headline
    assert report.source["text"].endswith("# BIRTH")
    assert f"tensor_dap.replay({report.bundle!r}, [qf1, qf2], optimizer=q_optimizer)" in to_text(report)
    assert all(torch.isfinite(p).all() for p in [*qf1.parameters(), *qf2.parameters()])  # before the update

    again = sac_module.build(seed=9)
    with pytest.raises(NonFiniteError) as replayed:
        tensor_dap.replay(report.bundle, {"qf1": again[0], "qf2": again[1]}, optimizer=again[2], on="raise")
    assert (replayed.value.report.module, replayed.value.report.op) == ("qf2", "SqrtBackward0")


def test_tensor_dap_run_watches_the_models_one_optimizer_trains_together(tmp_path):
    (tmp_path / "sac_parts.py").write_text(SAC)
    (tmp_path / "train.py").write_text("import torch\nfrom sac_parts import build, train\n\nqf1, qf2, q_optimizer = "
                                       "build()\ntrain(qf1, qf2, q_optimizer, 8, torch.Generator().manual_seed(1))\n")
    r = subprocess.run([sys.executable, "-m", "tensor_dap", "run", "--break-on-nan", "train.py"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert r.returncode == 1, r.stderr[-3000:]
    err = " ".join(r.stderr.split())
    assert "step 3 · NaN born in SqrtBackward0 (the backward of sqrt), in the backward of qf2" in err, err[-3000:]
    assert "tensor_dap.watch(qf1+qf2)" in err and ", [qf1, qf2], optimizer=q_optimizer)" in err
    bundle = next((tmp_path / ".tensor_dap" / "incidents").iterdir())
    again = subprocess.run([sys.executable, "-m", "tensor_dap", "run", "--replay", str(bundle), "train.py"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    said = " ".join(again.stderr.split())
    assert again.returncode == 0 and "on the program's qf1+qf2 and Adam" in said, said[-3000:]
    assert "replay: NaN born in SqrtBackward0 (the backward of sqrt), in the backward of qf2" in said


@pytest.mark.parametrize("model", ["model", [], [nn.Linear(2, 2), "x"], {"a.b": nn.Linear(2, 2)},
                                   {"": nn.Linear(1, 1)}])
def test_a_model_argument_that_is_no_module_nor_modules_is_one_type_error(model):
    with pytest.raises(TypeError, match="^model: expected a torch.nn.Module, or a list or dict of the modules one "):
        tensor_dap.watch(model, torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1))


def test_a_report_names_the_list_it_replays_on_and_nothing_else():
    """``names`` come back from report.json into a line the user may paste: a list of Python names, nothing more."""
    from tensor_dap.triggers.schema import _names

    assert _names({"model": "[qf1, self.qf2]"}) == {"model": "[qf1, self.qf2]"}
    for bad in ("[qf1, __import__('os')]", "[qf1,qf2]", "[]", "qf1, qf2"):
        with pytest.raises(ValueError):
            _names({"model": bad})


def test_a_critic_reset_between_its_forward_and_backward_keeps_only_its_own_pass(sac_module):
    """SAC/TD3: the actor's update backpropagates through the Q-networks, then ``q_optimizer.zero_grad()`` comes
    between their next forward and ``backward()``. That pass is discarded: the Q step's loss history holds the Q losses
    only, and its re-run holds the Q-networks' own forwards."""
    qf1, qf2, q_optimizer = sac_module.build()
    qf2.trap = False
    actor = nn.Linear(4, 1)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    q_losses = []
    with tensor_dap.watch([qf1, qf2], q_optimizer, on="raise") as w:
        for step in range(6):
            x, a, target = sac_module.batch(step + 10, gen)
            q_loss = ((qf1(x, a) - target) ** 2).mean() + ((qf2(x, a) - target) ** 2).mean()
            q_optimizer.zero_grad()  # (after the forward, as CleanRL's SAC does)
            q_loss.backward()
            q_optimizer.step()
            q_losses.append(q_loss.item())
            pi = actor(x)
            actor_loss = -torch.min(qf1(x, pi), qf2(x, pi)).mean()  # reaches the Q-networks too
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()
            forwards = len(w._loop.forwards)
        assert forwards == 2  # the actor pass's two forwards: the next Q step drops them once it resets
        assert list(w._history) == pytest.approx(q_losses), (list(w._history), q_losses)


class _Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.gru = nn.Embedding(20, 16), nn.GRU(16, 16, batch_first=True)

    def forward(self, x):
        return self.gru(self.emb(x))


class _Decoder(nn.Module):
    """Attends over the encoder's outputs; its padding mask covers every key for a padded query: NaN from softmax."""

    def __init__(self):
        super().__init__()
        self.emb, self.gru, self.out = nn.Embedding(20, 16), nn.GRU(16, 16, batch_first=True), nn.Linear(32, 20)

    def forward(self, enc_out, h, y_in):
        out, _ = self.gru(self.emb(y_in), h)
        scores = (out @ enc_out.transpose(1, 2)).masked_fill((y_in == 0)[:, :, None], float("-inf"))
        return self.out(torch.cat([out, torch.softmax(scores, -1) @ enc_out], -1))  # BIRTH


def test_a_nan_born_in_the_model_fed_this_one_s_outputs_is_named_there():
    """A seq2seq's encoder and decoder, each with an optimizer of its own, the encoder's stepping first: the NaN the
    decoder's softmax made reaches the encoder's outputs as a non-finite gradient; the encoder's watch re-runs the
    decoder's captured forwards and names the softmax, not "the loss computation outside the model"."""
    torch.manual_seed(0)
    encoder, decoder = _Encoder(), _Decoder()
    encoder_optimizer = torch.optim.SGD(encoder.parameters(), lr=0.01)
    decoder_optimizer = torch.optim.SGD(decoder.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(encoder, encoder_optimizer, on="raise"), \
            tensor_dap.watch(decoder, decoder_optimizer, on="raise"):
        for step in range(8):
            x, y = torch.randint(1, 20, (8, 7), generator=gen), torch.randint(1, 20, (8, 6), generator=gen)
            if step == 5:
                y[3, 4:] = 0  # a padded target
            enc_out, h = encoder(x)
            logits = decoder(enc_out, h, y[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 20), y[:, 1:].reshape(-1), ignore_index=0)
            encoder_optimizer.zero_grad()
            decoder_optimizer.zero_grad()
            loss.backward()
            encoder_optimizer.step()
            decoder_optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (5, "forward", "softmax"), report.headline
    assert report.source["text"].endswith("# BIRTH") and "fully masked row" in report.diagnosis
    assert report.notes[0].startswith("the gradient at this model's outputs came from _Decoder, watched too, which "
                                      "took them as its input: born in _Decoder's forward")


SEQ2SEQ = '''
import sys

import torch
from torch import nn

import tensor_dap


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.gru = nn.Embedding(20, 16), nn.GRU(16, 16, batch_first=True)

    def forward(self, x):
        return self.gru(self.emb(x))


class Decoder(nn.Module):
    """Attends over the sqrt of the encoder's positive outputs: NaN in the backward of sqrt, on the way to the
    encoder's outputs only (none of the decoder's own parameters is behind it)."""

    def __init__(self):
        super().__init__()
        self.emb, self.gru, self.out = nn.Embedding(20, 16), nn.GRU(16, 16, batch_first=True), nn.Linear(32, 20)

    def forward(self, enc_out, h, y_in):
        keys = torch.where(enc_out > 0, torch.sqrt(enc_out), 0.0)  # BIRTH
        out, _ = self.gru(self.emb(y_in), h)
        return self.out(torch.cat([out, torch.softmax(out @ keys.transpose(1, 2), -1) @ keys], -1))


torch.manual_seed(0)
encoder, decoder = Encoder(), Decoder()
encoder_optimizer = torch.optim.SGD(encoder.parameters(), lr=0.01)
decoder_optimizer = torch.optim.SGD(decoder.parameters(), lr=0.01)
gen = torch.Generator().manual_seed(1)


def train():
    for step in range(4):
        x, y = torch.randint(1, 20, (8, 7), generator=gen), torch.randint(1, 20, (8, 6), generator=gen)
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        enc_out, h = encoder(x)
        logits = decoder(enc_out, h, y[:, :-1])
        torch.nn.functional.cross_entropy(logits.reshape(-1, 20), y[:, 1:].reshape(-1)).backward()
        encoder_optimizer.step()
        decoder_optimizer.step()


if sys.argv[1:] == ["parts"]:
    with tensor_dap.watch([encoder, decoder], [encoder_optimizer, decoder_optimizer], on="raise"):
        train()
elif sys.argv[1:] == ["two"]:
    with tensor_dap.watch(encoder, encoder_optimizer, on="raise"), tensor_dap.watch(decoder, decoder_optimizer,
                                                                                  on="raise"):
        train()
else:
    train()
'''


def _seq2seq(tmp_path, *args):
    (tmp_path / "seq2seq.py").write_text(SEQ2SEQ)
    return subprocess.run([sys.executable, "-m", "tensor_dap", "run", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("how", [("seq2seq.py", "two"), ("seq2seq.py", "parts"), ("--break-on-nan", "seq2seq.py")])
def test_a_nan_the_decoder_s_backward_sends_only_to_the_encoder_is_named_in_the_decoder(tmp_path, how):
    """The decoder's NaN reaches none of its own parameters, only the encoder's outputs: a re-run of the decoder that
    went into its parameters alone skipped the op, so the encoder's watch said "the loss computation outside the
    model". A re-run now cuts an input made upstream into a leaf that takes a gradient, and goes through the ops on
    it: with a watch each, with both as parts, and under ``tensor-dap run --break-on-nan``."""
    r = _seq2seq(tmp_path, *how)
    err = " ".join(r.stderr.split())
    assert r.returncode == 1, err[-3000:]
    assert "step 0 · NaN born in SqrtBackward0 (the backward of sqrt), in the backward of " in err, err[-3000:]
    assert "outside any module" not in err
    assert "# BIRTH" in err and "seq2seq.py:" in err
    assert ("backward of decoder (Decoder)" if how[1] == "parts" else "backward of the model itself (Decoder)") in err


def test_tensor_dap_run_replays_a_bundle_of_models_watched_as_parts_on_those_parts(tmp_path):
    """``watch([encoder, decoder], ...)`` bundles both; ``--replay`` found the model of the first optimizer to step
    (the encoder alone), whose state the bundle's keys (``encoder.*``, ``decoder.*``) did not fit: it failed with a
    load_state_dict traceback. It now replays on the program's modules of those names."""
    first = _seq2seq(tmp_path, "seq2seq.py", "parts")
    assert first.returncode == 1, first.stderr[-3000:]
    bundle = next((tmp_path / ".tensor_dap" / "incidents").iterdir())
    again = _seq2seq(tmp_path, "--replay", str(bundle), "seq2seq.py")
    said = " ".join(again.stderr.split())
    assert again.returncode == 0 and "on the program's encoder+decoder and SGD" in said, said[-3000:]
    assert "replay: NaN born in SqrtBackward0 (the backward of sqrt), in the backward of decoder" in said, said[-3000:]


class _Upstream(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


class _InPlace(nn.Module):
    """Scales the other model's output in place before a sqrt-where trap on it (armed at step 2)."""

    def __init__(self):
        super().__init__()
        self.fc, self.armed = nn.Linear(4, 1), False

    def forward(self, h):
        h = h.mul_(2.0)
        k = torch.where(h > 0, torch.sqrt(h), 0.0) if self.armed else h  # INPLACE-BIRTH
        return self.fc(torch.tanh(h)) + 0.1 * k.sum(-1, keepdim=True)


def test_a_model_that_changes_the_other_model_s_output_in_place_is_still_re_run_through_it():
    """The input cut from upstream is handed to the re-run as a copy of the leaf: a forward that changes its input in
    place (``h.mul_(2)``) is refused on a leaf that takes a gradient, and the re-run failed back to "outside any
    module"."""
    torch.manual_seed(0)
    upstream, model = _Upstream(), _InPlace()
    first = torch.optim.SGD(upstream.parameters(), lr=0.1)
    second = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(upstream, first, on="raise"), \
            tensor_dap.watch(model, second, on="raise"):
        for step in range(4):
            model.armed = step == 2
            loss = model(upstream(torch.randn(8, 4))).pow(2).mean()
            first.zero_grad()
            second.zero_grad()
            loss.backward()
            first.step()
            second.step()
    report = info.value.report
    assert (report.step, report.phase, report.module_type, report.op) == (2, "backward", "_InPlace", "SqrtBackward0")
    assert report.source["text"].endswith("# INPLACE-BIRTH")
