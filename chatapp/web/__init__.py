"""The browser pages: the chat page and the sign-up, log-in and log-out forms."""
