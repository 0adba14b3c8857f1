"""PyTorch's examples/reinforcement_learning/reinforce.py, ported by swapping `torch` for `flame`: a Policy
of Linear -> Dropout -> ReLU -> Linear -> `F.softmax(action_scores, dim=1)` keeping `saved_log_probs` and
`rewards` lists on the module, `select_action` turning the NumPy state into
`torch.from_numpy(state).float().unsqueeze(0)`, `Categorical(probs)`, `m.sample()`,
`policy.saved_log_probs.append(m.log_prob(action))` and `action.item()`, and `finish_episode`'s discounted
returns built backwards into a deque, `torch.tensor(returns)`, `(returns - returns.mean()) / (returns.std() + eps)`
with `eps = np.finfo(np.float32).eps.item()`, `policy_loss.append(-log_prob * R)`,
`torch.cat(policy_loss).sum()`, Adam(lr=1e-2) and `del policy.rewards[:]`. The environment is a fixed
trajectory (states, the actions taken and rewards, as CartPole's shapes), so both libraries see the same
episodes: `m.sample()` is drawn and checked, then the trajectory's action is used (the one change).
Dropout is 0 (its masks are random). The program is f32 (`.float()`): flame starts from torch's weights
and must give the same losses, gradients and parameters to f32's precision, eagerly, and with the episode's
update under @flame.compile as the batched form (the log-probabilities of the episode's states at once)."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, numpy_of

GAMMA, EPISODES, LENGTH, HIDDEN = 0.99, 3, 6, 16


def _policy(lib):
    nn, F = lib.nn, lib.nn.functional

    class Policy(nn.Module):
        def __init__(self):
            super(Policy, self).__init__()  # noqa: UP008 (the example's spelling)
            self.affine1 = nn.Linear(4, HIDDEN)
            self.dropout = nn.Dropout(p=0.0)
            self.affine2 = nn.Linear(HIDDEN, 2)

            self.saved_log_probs = []
            self.rewards = []

        def forward(self, x):
            x = self.affine1(x)
            x = self.dropout(x)
            x = F.relu(x)
            action_scores = self.affine2(x)
            return F.softmax(action_scores, dim=1)

    return Policy()


def _episodes():
    r = np.random.default_rng(0)
    return [
        (r.standard_normal((LENGTH, 4)), r.integers(0, 2, LENGTH), r.uniform(0.0, 1.0, LENGTH)) for _ in range(EPISODES)
    ]


def _reinforce(lib, policy, episodes):
    """The example's main loop over the fixed trajectory: (losses, first episode's gradients)."""
    torch = lib
    Categorical = lib.distributions.Categorical
    optimizer = lib.optim.Adam(policy.parameters(), lr=1e-2)
    eps = np.finfo(np.float32).eps.item()

    def select_action(state, taken):
        state = torch.from_numpy(state).float().unsqueeze(0)
        probs = policy(state)
        m = Categorical(probs)
        action = m.sample()
        assert action.dtype == torch.int64 and tuple(action.shape) == (1,) and action.item() in (0, 1)
        action = torch.tensor([taken])  # the trajectory's action
        policy.saved_log_probs.append(m.log_prob(action))
        return action.item()

    def finish_episode():
        R = 0
        policy_loss = []
        returns = deque()
        for r in policy.rewards[::-1]:
            R = r + GAMMA * R
            returns.appendleft(R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for log_prob, R in zip(policy.saved_log_probs, returns):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        policy_loss = torch.cat(policy_loss).sum()
        policy_loss.backward()
        grads = [numpy_of(p.grad).copy() for p in policy.parameters()]
        optimizer.step()
        del policy.rewards[:]
        del policy.saved_log_probs[:]
        return policy_loss.item(), grads

    losses, first = [], None
    for states, actions, rewards in episodes:
        for state, taken, reward in zip(states, actions, rewards):
            action = select_action(state, int(taken))
            assert action == taken
            policy.rewards.append(float(reward))
        loss, grads = finish_episode()
        losses.append(loss)
        first = first or grads
    return losses, first


def _compiled_reinforce(policy, episodes):
    """The same updates with the episode's update under @flame.compile: the log-probabilities of all its
    states in one batch, the returns normalised inside, the loss as the example's cat of per-step terms."""
    Categorical = flame.distributions.Categorical
    optimizer = flame.optim.Adam(policy.parameters(), lr=1e-2)
    eps = np.finfo(np.float32).eps.item()

    @flame.compile
    def update(states, actions, returns):
        m = Categorical(policy(states))
        log_probs = m.log_prob(actions)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        policy_loss = [-log_probs[i : i + 1] * R for i, R in enumerate(returns)]
        optimizer.zero_grad()
        policy_loss = flame.cat(policy_loss).sum()
        policy_loss.backward()
        grads = [p.grad.clone() for p in policy.parameters()]
        optimizer.step()
        return policy_loss, grads

    losses, first = [], None
    for states, actions, rewards in episodes:
        R, returns = 0, deque()
        for r in rewards[::-1]:
            R = float(r) + GAMMA * R
            returns.appendleft(R)
        s = flame.from_numpy(states).float()
        loss, grads = update(s, flame.tensor(actions), flame.tensor(returns))
        losses.append(loss.item())
        first = first or [g.numpy() for g in grads]
    assert update.stats().traces == 1, update.stats()
    return losses, first


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_reinforce_trains_as_torch(compiled):
    torch.manual_seed(0)
    theirs = _policy(torch)
    mine = _policy(flame)
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    episodes = _episodes()
    want = _reinforce(torch, theirs, episodes)
    got = _compiled_reinforce(mine, episodes) if compiled else _reinforce(flame, mine, episodes)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-6, err_msg="policy losses")
    for g, w, (name, _) in zip(got[1], want[1], theirs.named_parameters()):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6, err_msg=f"first gradient of {name}")
    # Adam moves each weight by about lr (1e-2) at first whatever its gradient's size: compare well below it
    assert_same_params(mine, theirs, rtol=1e-4, atol=1e-4)
    assert mine.saved_log_probs == [] and mine.rewards == []


def test_compiling_finish_episode_as_written_says_why_not():
    """`finish_episode` under @flame.compile as written: its log-probabilities were made eagerly by
    select_action, so the backward inside cannot reach the parameters; flame raises naming the append
    line (torch would differentiate through them) and the parameters are left as they were."""
    policy = _policy(flame)
    optimizer = flame.optim.Adam(policy.parameters(), lr=1e-2)
    states, actions, rewards = _episodes()[0]
    for state, taken, reward in zip(states, actions, rewards):
        m = flame.distributions.Categorical(policy(flame.from_numpy(state).float().unsqueeze(0)))
        policy.saved_log_probs.append(m.log_prob(flame.tensor([int(taken)])))
        policy.rewards.append(float(reward))

    @flame.compile
    def finish_episode():
        returns = flame.tensor(policy.rewards)
        returns = (returns - returns.mean()) / (returns.std() + 1e-7)
        policy_loss = [-log_prob * R for log_prob, R in zip(policy.saved_log_probs, returns)]
        optimizer.zero_grad()
        policy_loss = flame.cat(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()

    before = [p.numpy().copy() for p in policy.parameters()]
    with pytest.raises(flame.errors.TraceError, match=r"saved_log_probs.append(.|\n)*policy_loss.backward\(\)"):
        finish_episode()
    for p, b in zip(policy.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), b)
