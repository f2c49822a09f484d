"""Sign-up form: checks the chosen username and password before chatapp.identity converts the guest."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.validators import UnicodeUsernameValidator

from chatapp.identity import GUEST_PREFIX


class SignupForm(forms.Form):
    """A username (not taken, not in the guest namespace) and a password typed twice."""

    username = forms.CharField(
        max_length=150,
        validators=[UnicodeUsernameValidator()],
        help_text="Letters, digits and @ . + - _ only.",
        widget=forms.TextInput(attrs={"autocomplete": "username", "autofocus": True}),
    )
    password1 = forms.CharField(
        label="Password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )
    password2 = forms.CharField(
        label="Password again",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )

    def clean_username(self) -> str:
        username = self.cleaned_data["username"]
        if username.lower().startswith(GUEST_PREFIX):
            raise forms.ValidationError(f"Usernames may not start with “{GUEST_PREFIX}”.")
        if get_user_model().objects.filter(username__iexact=username).exists():
            raise forms.ValidationError("That username is taken.")
        return username

    def clean(self) -> dict:
        cleaned = super().clean()
        first, second = cleaned.get("password1"), cleaned.get("password2")
        if first and second and first != second:
            self.add_error("password2", "The two passwords differ.")
        elif first:
            candidate = get_user_model()(username=cleaned.get("username", ""))
            try:
                password_validation.validate_password(first, user=candidate)
            except forms.ValidationError as exc:
                self.add_error("password1", exc)
        return cleaned
