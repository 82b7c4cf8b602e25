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
# SHIM of nemo_gym/server_utils.py. Verbatim from it: SESSION_ID_KEY, BaseServer.setup_liveness,
# SimpleServer.get_session_middleware_key, setup_session_middleware (the signed session cookie
# and the session id every handler reads), the generic branches of setup_exception_middleware,
# and the request-validation handler of run_webserver. Changed: run_webserver reads the server's
# config from NEMO_GYM_CONFIG_DICT and NEMO_GYM_CONFIG_PATH, as a server started by ng_run does,
# but with no Ray, Hydra, OmegaConf, head server or worker processes; ServerClient and the HTTP
# client helpers (aiohttp) are stubs that raise if called. See ../NOTICE.
import json
import os
from abc import abstractmethod
from traceback import format_exc, print_exc
from typing import Any, Type
from uuid import uuid4

import uvicorn
import yaml
from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.middleware.sessions import SessionMiddleware

from nemo_gym.config_types import BaseRunServerInstanceConfig
from nemo_gym.global_config import NEMO_GYM_CONFIG_DICT_ENV_VAR_NAME, NEMO_GYM_CONFIG_PATH_ENV_VAR_NAME


class ServerClient(BaseModel):
    pass


async def get_response_json(response: Any) -> Any:
    raise NotImplementedError("nemo_gym shim: no HTTP client to other NeMo Gym servers")


async def raise_for_status(response: Any) -> None:
    raise NotImplementedError("nemo_gym shim: no HTTP client to other NeMo Gym servers")


SESSION_ID_KEY = "session_id"


class BaseServer(BaseModel):
    """
    All instances of BaseServer are queryable using ServerClient.
    """

    config: BaseRunServerInstanceConfig

    @classmethod
    def load_config_from_global_config(cls) -> "BaseRunServerInstanceConfig":
        config_path_str = os.environ[NEMO_GYM_CONFIG_PATH_ENV_VAR_NAME]
        global_config_dict = yaml.safe_load(os.environ[NEMO_GYM_CONFIG_DICT_ENV_VAR_NAME])
        server_config_dict = global_config_dict[config_path_str]
        server_config_dict = list(server_config_dict.values())[0]
        server_config_dict = list(server_config_dict.values())[0]

        server_config_cls: Type[BaseRunServerInstanceConfig] = cls.model_fields["config"].type_
        return server_config_cls.model_validate(server_config_dict | {"name": config_path_str})

    def setup_liveness(self, app: FastAPI) -> None:
        @app.get("/", include_in_schema=False)
        async def _liveness():
            return {"status": "ok"}


class SimpleServer(BaseServer):
    server_client: ServerClient

    @abstractmethod
    def setup_webserver(self) -> FastAPI:
        pass

    def get_session_middleware_key(self) -> str:
        # This method is here to override in case we want to ever use an actual session middleware secret key.
        # e.g. for an actual product.
        return f"{self.__class__.__name__}___{self.config.name}"

    def setup_session_middleware(self, app: FastAPI) -> None:
        if getattr(app.state, "nemo_gym_session_middleware_installed", False):
            return
        app.state.nemo_gym_session_middleware_installed = True

        # The multiple middleware execution order described in https://fastapi.tiangolo.com/tutorial/middleware/#multiple-middleware-execution-order
        # Says that if you register middlewares A and then B,
        # - at request time: They execute B first then A
        # - at response time: They return to A first and then B
        # So for adding session IDs, that middleware must run after SessionMiddleware, so it must be registered before it.

        @app.middleware("http")
        async def add_session_id(request: Request, call_next):  # pragma: no cover
            # Always assign so Starlette 1.0+ marks session.modified=True and re-sends Set-Cookie.
            request.session[SESSION_ID_KEY] = request.session.get(SESSION_ID_KEY, str(uuid4()))

            response: Response = await call_next(request)
            return response

        session_middleware_key = self.get_session_middleware_key()
        app.add_middleware(SessionMiddleware, secret_key=session_middleware_key, session_cookie=session_middleware_key)

    def setup_exception_middleware(self, app: FastAPI) -> None:  # pragma: no cover
        @app.middleware("http")
        async def exception_handling_middleware(request: Request, call_next):
            try:
                return await call_next(request)
            except Exception as e:
                print(
                    f"""🚨 Caught an exception printed above in {self.config.name} ({self.__class__.__name__}). If you expect this to be fed back into this model, the exception repr i.e. `repr(e)` is returned to the model. However, please make sure this exception is caught in your server and returned to the model as appropriate. See https://fastapi.tiangolo.com/tutorial/handling-errors/#use-httpexception
Formatted exception: {format_exc()}
repr(e): {repr(e)}"""
                )
                return JSONResponse(content=repr(e), status_code=500)
            except:
                print_exc()
                print(
                    f"""🚨 Caught an unknown exception printed above in {self.config.name} ({self.__class__.__name__}). If you expect this to be fed back into this model, nothing meaningful is returned to the model. Please make sure this exception is caught in your server and returned to the model as appropriate. See https://fastapi.tiangolo.com/tutorial/handling-errors/#use-httpexception"""
                )
                return JSONResponse(content="An unknown error occurred", status_code=500)

    @classmethod
    def run_webserver(cls) -> FastAPI:  # pragma: no cover
        server = cls(config=cls.load_config_from_global_config(), server_client=ServerClient())

        app = server.setup_webserver()
        server.setup_liveness(app)
        server.setup_exception_middleware(app)

        @app.exception_handler(RequestValidationError)
        async def validation_exception_handler(request: Request, exc):
            print(
                f"""Hit validation exception! Errors: {json.dumps(exc.errors(), indent=4)}
Full body: {json.dumps(exc.body, indent=4)}
"""
            )
            return await request_validation_exception_handler(request, exc)

        uvicorn.run(app, host=server.config.host, port=server.config.port, timeout_keep_alive=30, access_log=False)
        return app
