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
# SHIM of nemo_gym/config_types.py: only the classes and names the vendored files import, with
# the fields NeMo Gym gives them (Domain is a plain str here). See ../NOTICE.
from typing import Any, Dict, List, Optional

from pydantic import BaseModel, Field


class BaseServerConfig(BaseModel):
    host: str
    port: int
    num_workers: Optional[int] = None


class BaseRunServerConfig(BaseServerConfig):
    entrypoint: str
    domain: Optional[str] = None  # Only required for resources servers


class BaseRunServerInstanceConfig(BaseRunServerConfig):
    name: str  # This name is unique at runtime.


class AggregateMetricsRequest(BaseModel):
    verify_responses: List[Dict[str, Any]]


class AggregateMetrics(BaseModel):
    group_level_metrics: List[Dict[str, Any]] = Field(default_factory=list)
    agent_metrics: Dict[str, Any] = Field(default_factory=dict)
    key_metrics: Dict[str, Any] = Field(default_factory=dict)


ROLLOUT_PATH_PREFIX = "ng-rollout"
TOKEN_CAPTURE_PATH_SEGMENT = "training-token-capture"
