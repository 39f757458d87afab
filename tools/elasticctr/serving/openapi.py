"""The service's OpenAPI description (served at /openapi.json; the fuzz tests read it)."""

from __future__ import annotations

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "problems": {"type": "array", "items": {"type": "string"}},
            },
        }
    },
}
_ERR = {"description": "error", "content": {"application/json": {"schema": _ERROR}}}
_FEASIGN = {
    "oneOf": [
        {"type": "integer", "minimum": 0, "maximum": 18446744073709551615},
        {"type": "string", "pattern": "^[0-9]{1,20}$"},
    ]
}

SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "ElasticCTR prediction service", "version": "1"},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {"Error": _ERROR},
    },
    "paths": {
        "/v1/predict": {
            "post": {
                "summary": "Click probabilities for samples, all from one model version.",
                "security": [{"bearer": []}],
                "parameters": [
                    {
                        "name": "version",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "pattern": "^[0-9]{8}/[0-9]{2}$"},
                        "description": "Fail with 409 unless this version is being served.",
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "text/plain": {
                            "schema": {"type": "string"},
                            "example": "1 0 6927017134761466251:0 6718470718629228516:1\n",
                        },
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["samples"],
                                "additionalProperties": False,
                                "properties": {
                                    "samples": {
                                        "type": "array",
                                        "minItems": 1,
                                        "items": {
                                            "type": "object",
                                            "required": ["slots"],
                                            "additionalProperties": False,
                                            "properties": {
                                                "slots": {
                                                    "type": "object",
                                                    "additionalProperties": {
                                                        "type": "array",
                                                        "items": _FEASIGN,
                                                    },
                                                },
                                                "click": {"type": "integer", "enum": [0, 1]},
                                            },
                                        },
                                    }
                                },
                            }
                        },
                    },
                },
                "responses": {
                    "200": {
                        "description": "one probability per sample, in request order",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["version", "probabilities"],
                                    "properties": {
                                        "version": {"type": "string"},
                                        "probabilities": {
                                            "type": "array",
                                            "items": {"type": "number"},
                                        },
                                    },
                                }
                            }
                        },
                    },
                    **{str(c): _ERR for c in (400, 401, 409, 413, 415, 503)},
                },
            }
        },
        "/v1/version": {
            "get": {
                "summary": "The version being served: slots, embedding dim, model name.",
                "security": [{"bearer": []}],
                "responses": {"200": {"description": "version info"}, "503": _ERR},
            }
        },
        "/admin/version": {
            "post": {
                "summary": "Switch to a version (cube-transfer's notify); verified first.",
                "security": [{"bearer": []}],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["version"],
                                "properties": {"version": {"type": "string"}},
                            }
                        }
                    },
                },
                "responses": {
                    "200": {"description": "switched (or already current)"},
                    "400": _ERR,
                    "422": _ERR,
                },
            }
        },
        "/healthz": {"get": {"responses": {"200": {"description": "process alive"}}}},
        "/readyz": {
            "get": {
                "responses": {
                    "200": {"description": "a version is loaded, or no model version exists yet"},
                    "503": _ERR,
                }
            }
        },
        "/metrics": {"get": {"responses": {"200": {"description": "Prometheus text format"}}}},
    },
}
