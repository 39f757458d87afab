"""Debian's Chromium through chromium-driver (selenium) for the console's browser tests, and
the new-scenario form as those tests fill it in (ids from console/static/new.js: `f-PATH`
for a field of values path PATH, `e-PATH` for the problems shown beside it)."""

from __future__ import annotations

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def chromium(width: int = 1280, height: int = 1000):
    """A headless Chromium session (the caller quits it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


class Form:
    """The console's new-scenario form in `driver`."""

    def __init__(self, driver):
        from selenium.webdriver.common.by import By

        self.driver, self.by = driver, By

    def field(self, path: str):
        return self.driver.find_element(self.by.ID, f"f-{path}")

    def value(self, path: str) -> str:
        return self.field(path).get_attribute("value")

    def error(self, path: str) -> str:
        return self.driver.find_element(self.by.ID, f"e-{path}").text

    def put(self, path: str, text: str) -> None:
        self.field(path).clear()
        self.field(path).send_keys(text)

    def choose(self, path: str, value: str) -> None:
        from selenium.webdriver.support.ui import Select

        Select(self.field(path)).select_by_value(value)

    def state(self) -> str:
        return self.driver.find_element(self.by.ID, "new-state").text


def served(driver, name: str) -> str | None:
    """The version scenario `name`'s card says is served ("" none yet; None: no card). Read in
    one script: the cards are drawn anew every refresh, so an element found first may be
    gone when its attribute is asked."""
    return driver.execute_script(
        "const c = document.getElementById(arguments[0]); return c ? c.dataset.served : null",
        f"card-{name}",
    )
