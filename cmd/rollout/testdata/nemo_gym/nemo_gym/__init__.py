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
# SHIM (not NeMo Gym's nemo_gym/__init__.py, which sets up paths and logging for a full
# install). It only makes pydantic 1.10 (Debian bookworm's python3-pydantic) answer the three
# pydantic v2 calls that the vendored files and the example make: model_dump, model_validate
# and model_fields. Nothing else of pydantic v2 is emulated; see ../NOTICE.
from pydantic import BaseModel

if not hasattr(BaseModel, "model_dump"):
    BaseModel.model_dump = BaseModel.dict
    BaseModel.model_validate = classmethod(lambda cls, obj: cls.parse_obj(obj))

    class _ModelFields:
        def __get__(self, obj, cls):
            return cls.__fields__

    BaseModel.model_fields = _ModelFields()
