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
# SHIM of nemo_gym/openai_utils.py: NeMo Gym builds these two models on openai-python's types,
# which are not installable here. The shim keeps what a resources server's /verify checks of
# them at the top level: every field NeMo Gym's NeMoGymResponseCreateParamsNonStreaming accepts
# and nothing else (extra="forbid", as NeMo Gym sets it), and the fields openai-python's
# Response requires, with each output item carrying a "type" (as NeMo Gym's
# _require_response_output_item_type demands). Nested items are not validated. See ../NOTICE.
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, Extra, Field, validator


class NeMoGymResponseCreateParamsNonStreaming(BaseModel):
    class Config:
        extra = Extra.forbid

    background: Optional[bool] = None
    include: Optional[List[Any]] = None
    input: Union[str, List[Dict[str, Any]]]
    instructions: Optional[str] = None
    max_output_tokens: Optional[int] = None
    max_tool_calls: Optional[int] = None
    metadata: Optional[Dict[str, str]] = None
    model: Optional[str] = None
    parallel_tool_calls: bool = True  # OpenAI default
    previous_response_id: Optional[str] = None
    prompt: Optional[Dict[str, Any]] = None
    reasoning: Optional[Dict[str, Any]] = None
    service_tier: Optional[Literal["auto", "default", "flex", "scale", "priority"]] = None
    store: Optional[bool] = None
    temperature: Optional[float] = None
    text: Optional[Dict[str, Any]] = None
    tool_choice: Union[str, Dict[str, Any]] = "auto"  # OpenAI default
    tools: List[Dict[str, Any]] = Field(default_factory=list)
    top_logprobs: Optional[int] = None
    top_p: Optional[float] = None
    truncation: Optional[Literal["auto", "disabled"]] = None
    user: Optional[str] = None
    stream: Optional[Literal[False]] = None


class NeMoGymResponse(BaseModel):
    class Config:
        extra = Extra.allow

    id: str
    created_at: float
    model: str
    object: Literal["response"]
    output: List[Dict[str, Any]]
    parallel_tool_calls: bool
    tool_choice: Union[str, Dict[str, Any]]
    tools: List[Dict[str, Any]]
    usage: Optional[Dict[str, Any]] = None

    @validator("output", each_item=True)
    def _require_response_output_item_type(cls, value: Dict[str, Any]) -> Dict[str, Any]:
        if "type" not in value:
            raise ValueError("Responses API output items must include a type discriminator")
        return value
