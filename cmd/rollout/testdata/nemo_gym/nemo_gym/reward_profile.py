# SPDX-FileCopyrightText: Copyright (c) 2025 NVIDIA CORPORATION & AFFILIATES. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
# http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# SHIM of nemo_gym/reward_profile.py: AggregateMetricsMixin's two hooks as NeMo Gym defines
# them, and compute_aggregate_metrics reduced to the mean reward (NeMo Gym's RewardProfiler
# needs pandas and wandb). rollout does not call /aggregate_metrics. See ../NOTICE.
from typing import Any, Dict, List

from nemo_gym.config_types import AggregateMetrics


class AggregateMetricsMixin:
    def compute_metrics(self, tasks: List[List[Dict[str, Any]]]) -> Dict[str, Any]:
        return {}

    def get_key_metrics(self, agent_metrics: Dict[str, Any]) -> Dict[str, Any]:
        return {k: v for k, v in agent_metrics.items() if k.startswith("mean/")}


def compute_aggregate_metrics(verify_responses, compute_metrics_fn=None, get_key_metrics_fn=None) -> AggregateMetrics:
    if not verify_responses:
        return AggregateMetrics()
    rewards = [float(r.get("reward", 0.0)) for r in verify_responses]
    agent_metrics = {"mean/reward": sum(rewards) / len(rewards)}
    key = get_key_metrics_fn(agent_metrics) if get_key_metrics_fn else agent_metrics
    return AggregateMetrics(agent_metrics=agent_metrics, key_metrics=key)
