# The cart benchmark of examples/cart (Go) as a NeMo Gym resource server, on NeMo Gym's own base
# classes (nemo_gym.base_resources_server), written the way NeMo Gym's
# resources_servers/example_session_state_mgmt/app.py is. Copy this directory to
# resources_servers/cart/ in a NeMo Gym checkout and start it with ng_run (see
# docs/own-benchmark.md); rollout reaches it with --server URL, as it reaches the Go one.
#
# rollout's suite runs it (TestCartNemoGymExampleEndToEnd) on the files of NeMo Gym it needs,
# vendored with a shim for Debian's pydantic 1.10 in cmd/rollout/testdata/nemo_gym (see NOTICE
# there): validate --oracle, a run scoring 1, a run that errs scoring 0.
from typing import Dict, Optional

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field

from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.server_utils import SESSION_ID_KEY


class CartResourcesServerConfig(BaseResourcesServerConfig):
    pass


class Cart(BaseModel):
    prices: Dict[str, int]
    total: int = 0
    ordered: Optional[int] = None


class CartSeedSessionRequest(BaseSeedSessionRequest):
    prices: Dict[str, int]


class AddToCartRequest(BaseModel):
    item: str
    quantity: int


class AddToCartResponse(BaseModel):
    item: str
    cart_total: int


class CheckoutResponse(BaseModel):
    total: int


class CartVerifyRequest(BaseVerifyRequest):
    expected_total: int


class CartVerifyResponse(BaseVerifyResponse):
    ordered_total: Optional[int] = None


class CartResourcesServer(SimpleResourcesServer):
    config: CartResourcesServerConfig
    session_id_to_cart: Dict[str, Cart] = Field(default_factory=dict)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/add_to_cart")(self.add_to_cart)
        app.post("/checkout")(self.checkout)
        return app

    def _cart(self, request: Request) -> Cart:
        cart = self.session_id_to_cart.get(request.session[SESSION_ID_KEY])
        if cart is None:
            raise HTTPException(status_code=409, detail="no cart: call seed_session first")
        return cart

    async def seed_session(self, request: Request, body: CartSeedSessionRequest) -> BaseSeedSessionResponse:
        self.session_id_to_cart[request.session[SESSION_ID_KEY]] = Cart(prices=body.prices)
        return BaseSeedSessionResponse()

    async def add_to_cart(self, request: Request, body: AddToCartRequest) -> AddToCartResponse:
        cart = self._cart(request)
        if body.item not in cart.prices or body.quantity < 1:
            raise HTTPException(status_code=404, detail=f"cannot add {body.quantity} of {body.item!r}")
        cart.total += cart.prices[body.item] * body.quantity
        return AddToCartResponse(item=body.item, cart_total=cart.total)

    async def checkout(self, request: Request) -> CheckoutResponse:
        cart = self._cart(request)
        cart.ordered = cart.total
        return CheckoutResponse(total=cart.total)

    async def verify(self, request: Request, body: CartVerifyRequest) -> CartVerifyResponse:
        cart = self.session_id_to_cart.get(request.session[SESSION_ID_KEY])
        if cart is None or cart.ordered is None:
            return CartVerifyResponse(**body.model_dump(), reward=0.0)
        reward = float(cart.ordered == body.expected_total)
        return CartVerifyResponse(**body.model_dump(), reward=reward, ordered_total=cart.ordered)


if __name__ == "__main__":
    CartResourcesServer.run_webserver()
